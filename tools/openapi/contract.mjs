// contract.mjs: sends real requests to a running seckill and validates every
// answer (status, documented headers, content type, body) against docs/openapi.yaml
// with ajv (JSON Schema 2020-12, what OpenAPI 3.1 schemas are). tests/it_contract.sh
// starts the pieces and runs it once per phase:
//
//   node contract.mjs PHASE     PHASE: main | room | lost | down | coverage
//
// Environment: CONTRACT_DOC (docs/openapi.yaml), CONTRACT_API_MD (docs/api.md),
// CONTRACT_STATE (a JSON file the phases share: answers seen, the first order id),
// BASE (the instance), LOST_BASE (the instance behind the proxy that loses the
// commit's answer), REDIS_PORT, ADMIN_TOKEN.
// Prints "ok   - NAME" or "FAIL - NAME: why" per request and exits 1 on any FAIL.
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import YAML from "yaml";
import Ajv2020 from "ajv/dist/2020.js";

const env = (k) => {
  if (!process.env[k]) throw new Error(`${k} is not set`);
  return process.env[k];
};
const doc = YAML.parse(readFileSync(env("CONTRACT_DOC"), "utf8"));
const statePath = env("CONTRACT_STATE");
const state = existsSync(statePath)
  ? JSON.parse(readFileSync(statePath, "utf8"))
  : { seen: {}, ops: {}, errors: {}, vars: {} };
const ajv = new Ajv2020({ strict: false, allErrors: true });
ajv.addSchema(doc, "doc");

let failed = 0;
const ok = (name) => console.log(`ok   - ${name}`);
const fail = (name, why) => {
  failed++;
  console.log(`FAIL - ${name}: ${why}`);
};

// ---- the document -----------------------------------------------------------
const esc = (t) => t.replace(/~/g, "~0").replace(/\//g, "~1");
function resolve(obj, ptr) { // follows a $ref chain; returns [object, its pointer]
  while (obj && obj.$ref) {
    ptr = obj.$ref.slice(1);
    obj = ptr.split("/").slice(1).reduce((o, t) => o[t.replace(/~1/g, "/").replace(/~0/g, "~")], doc);
  }
  return [obj, ptr];
}
const validators = new Map();
function schemaCheck(ptr, value) { // null when value fits the schema at ptr, else why
  if (!validators.has(ptr)) validators.set(ptr, ajv.compile({ $ref: `doc#${ptr}` }));
  const v = validators.get(ptr);
  return v(value) ? null : ajv.errorsText(v.errors, { dataVar: "body" });
}
function templateRegex(t) {
  return new RegExp("^" + t.replace(/\{[^}]+\}/g, "[^/]+") + "$");
}
// The documented answer for method + path + status: [response, its pointer, op key].
function documented(method, path, status, layer) {
  const comp = (name) => resolve(doc.components.responses[name], `/components/responses/${name}`);
  if (layer === "timeout") return [...comp("RequestTimeout"), `(request timeout) ${status}`];
  if (layer) return [...comp("HttpLayer"), `(http layer) ${status}`];
  const p = path.split("?")[0];
  const tmpl = Object.keys(doc.paths).find((t) => templateRegex(t).test(p));
  if (!tmpl) return [...comp("NoRoute"), "(no route)"];
  const m = method === "HEAD" ? "get" : method.toLowerCase();
  const op = doc.paths[tmpl][m];
  if (!op) return [...comp("MethodNotAllowed"), "(method not allowed)"];
  const key = `${m.toUpperCase()} ${tmpl}`;
  const base = `/paths/${esc(tmpl)}/${m}/responses`;
  const r = op.responses[String(status)];
  if (!r) return [null, null, key];
  return [...resolve(r, `${base}/${status}`), key];
}

// ---- requests ---------------------------------------------------------------
function send(base, { method, path, headers = {}, body }) {
  return new Promise((res, rej) => {
    const u = new URL(base);
    const data = body === undefined ? undefined : Buffer.from(body);
    const h = { ...headers };
    if (data) h["Content-Length"] = data.length;
    const req = http.request(
      { host: u.hostname, port: u.port, method, path, headers: h, timeout: 10000 },
      (r) => {
        const chunks = [];
        r.on("data", (c) => chunks.push(c));
        r.on("end", () => res({ status: r.statusCode, headers: r.headers, body: Buffer.concat(chunks).toString() }));
      });
    req.on("timeout", () => req.destroy(new Error("no answer in 10 s")));
    req.on("error", rej);
    if (data) req.write(data);
    req.end();
  });
}
function sendRaw(base, text) { // bytes on a new connection; the whole answer as it came
  return new Promise((res, rej) => {
    const u = new URL(base);
    const s = net.connect(Number(u.port), u.hostname, () => s.write(text));
    const chunks = [];
    s.setTimeout(5000, () => s.destroy());
    s.on("data", (c) => chunks.push(c));
    s.on("close", () => {
      const raw = Buffer.concat(chunks).toString();
      const [head, ...rest] = raw.split("\r\n\r\n");
      const lines = head.split("\r\n");
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0] || "");
      if (!m) return rej(new Error(`no HTTP answer: ${JSON.stringify(raw.slice(0, 80))}`));
      const headers = {};
      for (const l of lines.slice(1)) {
        const i = l.indexOf(":");
        headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
      }
      res({ status: Number(m[1]), headers, body: rest.join("\r\n\r\n") });
    });
    s.on("error", rej);
  });
}

// Checks one answer against the document; returns the list of problems.
function check(c, a) {
  const why = [];
  if (a.status !== c.status) why.push(`status ${a.status}, expected ${c.status} (body ${a.body.slice(0, 120)})`);
  const [resp, ptr, key] = documented(c.method, c.path, a.status, c.layer);
  if (!resp) return [...why, `${key} does not document status ${a.status}`];
  for (const [name, hdef] of Object.entries(resp.headers || {})) {
    const [h, hptr] = resolve(hdef, `${ptr}/headers/${esc(name)}`);
    const got = a.headers[name.toLowerCase()];
    if (got === undefined) {
      if (h.required) why.push(`header ${name} missing`);
    } else {
      const e = schemaCheck(`${hptr}/schema`, got);
      if (e) why.push(`header ${name}: ${got}: ${e}`);
    }
  }
  const content = resp.content || {};
  let ctype = (a.headers["content-type"] || "").split(";")[0].trim();
  if (!ctype && resp["x-no-content-type"]) ctype = Object.keys(content)[0];
  // a response documented without content (204): none must come
  if (Object.keys(content).length === 0)
    return a.body === "" && !ctype ? why : [...why, `a body or a type where ${key} ${a.status} has none`];
  if (!content[ctype]) return [...why, `content type '${ctype}' not documented for ${key} ${a.status}`];
  let body = a.body;
  if (ctype === "application/json") {
    try { body = JSON.parse(a.body); } catch { return [...why, `body is not JSON: ${a.body.slice(0, 80)}`]; }
  }
  const [, sptr] = resolve(content[ctype].schema, `${ptr}/content/${esc(ctype)}/schema`);
  const e = schemaCheck(sptr, body);
  if (e) why.push(e);
  if (c.error && body.error !== c.error) why.push(`error '${body.error}', expected '${c.error}'`);
  if (c.also) { const m = c.also(body, a); if (m) why.push(m); }
  if (!why.length) {
    state.seen[c.layer === true ? `${a.status} html` : a.status] = true;
    if (!key.startsWith("(")) state.ops[key] = true;
    if (body && body.error) state.errors[`${a.status} ${body.error}`] = true;
  }
  return why;
}

async function run(base, cases) {
  for (let c of cases) {
    if (typeof c.path === "function") c = { ...c, path: c.path() };
    const name = `${c.name}: ${c.method} ${c.path.slice(0, 60)} -> ${c.status}${c.error ? " " + c.error : ""}`;
    let a;
    try {
      a = c.raw ? await sendRaw(base, c.raw) : await send(base, c);
      // c.within: the answer the document promises within that many ms (asked again
      // every 50 ms until it comes or the time is up; the last answer is judged)
      for (const until = Date.now() + (c.within || 0); a.status !== c.status && Date.now() < until; ) {
        await new Promise((res) => setTimeout(res, 50));
        a = await send(base, c);
      }
    } catch (e) {
      fail(name, e.message);
      continue;
    }
    const why = check(c, a);
    if (why.length) fail(name, why.join("; "));
    else ok(name);
    if (c.after) c.after(JSON.parse(a.body || "null"), a);
  }
}

function redisCommand(port, line) { // one inline command; its first reply line
  return new Promise((res, rej) => {
    const s = net.connect(Number(port), "127.0.0.1", () => s.write(line + "\r\n"));
    s.once("data", (d) => { res(d.toString().split("\r\n")[0]); s.end(); });
    s.on("error", rej);
  });
}

// One command sent whole (RESP), its arguments any bytes; its first reply line.
function redisArgs(port, args) {
  const wire = `*${args.length}\r\n` +
    args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join("");
  return redisCommand(port, wire.slice(0, -2));
}
// Sets a field of an order's record with the service's own record pieces
// (inventory/lua/rec.lua): ":1", or ":0" when there is no such record.
function recordSet(port, id, field, value) {
  const rec = readFileSync(new URL("../../inventory/lua/rec.lua", import.meta.url), "utf8");
  const lua = `${rec}
local r = rec_get(KEYS[1], ARGV[1])
if not r then return 0 end
r[ARGV[2]] = ARGV[3]
redis.call('HSET', KEYS[1], ARGV[1], rec_text(r))
return 1`;
  const key = "order:" + (id.length > 9 ? id.slice(0, id.length - 9) : "0");
  return redisArgs(port, ["EVAL", lua, "1", key, id, field, value]);
}

// ---- the phases -------------------------------------------------------------
const admin = () => ({ Authorization: `Bearer ${env("ADMIN_TOKEN")}` });
const json = { "Content-Type": "application/json" };
const v = state.vars;
const phases = {
  async main() {
    const base = env("BASE");
    await run(base, [
      { name: "PUT without token", method: "PUT", path: "/skus/tv", body: '{"stock":3}', status: 401, error: "unauthorized" },
      { name: "PUT negative stock", method: "PUT", path: "/skus/tv", headers: admin(), body: '{"stock":-5}', status: 400, error: "bad_request" },
      { name: "PUT bad sku name", method: "PUT", path: "/skus/bad$sku", headers: admin(), body: '{"stock":1}', status: 400, error: "bad_request" },
      { name: "PUT creates", method: "PUT", path: "/skus/tv", headers: admin(), body: '{"stock":3,"segments":2,"per_user_limit":2}', status: 201 },
      { name: "PUT resets", method: "PUT", path: "/skus/tv", headers: admin(), body: '{"stock":3,"segments":2,"per_user_limit":2}', status: 200 },
      { name: "PUT, the scheme in lower case", method: "PUT", path: "/skus/tv", headers: { Authorization: `bearer ${env("ADMIN_TOKEN")}` }, body: '{"stock":3,"segments":2,"per_user_limit":2}', status: 200 },
      { name: "PUT with an unknown field", method: "PUT", path: "/skus/tv", headers: admin(), body: '{"stock":5,"per_user_limt":3}', status: 400, error: "bad_request", also: (b) => b.detail.includes("per_user_limt") ? null : `detail '${b.detail}' does not name the field` },
      { name: "PUT body over 4 KiB", method: "PUT", path: "/skus/tv", headers: admin(), body: `{"stock":1,"pad":"${"x".repeat(5000)}"}`, status: 413, error: "too_large" },
      { name: "stock report", method: "GET", path: "/skus/tv", status: 200, also: (b) => b.remaining === 3 && b.segments.length === 2 ? null : "not 3 left in 2 segments" },
      { name: "unknown SKU", method: "GET", path: "/skus/nosuch", status: 404, error: "not_found" },
      { name: "list SKUs", method: "GET", path: "/skus?limit=10", headers: admin(), status: 200, also: (b) => b.skus.some((s) => s.sku === "tv" && s.remaining === 3) ? null : "tv not listed with 3 left" },
      { name: "list SKUs without the token", method: "GET", path: "/skus", status: 401, error: "unauthorized" },
      { name: "list SKUs, a bad limit", method: "GET", path: "/skus?limit=0", headers: admin(), status: 400, error: "bad_request" },
      { name: "order", method: "POST", path: "/skus/tv/orders", headers: { ...json, "Idempotency-Key": "ann-1" }, body: '{"user_id":"ann","qty":2}', status: 201, also: (b) => b.state === "placed" ? null : `state ${b.state}`, after: (b) => { v.order = b.order_id; v.orderBody = b; } },
      { name: "idempotent repeat", method: "POST", path: "/skus/tv/orders", headers: { "Idempotency-Key": "ann-1" }, body: '{"user_id":"ann","qty":2}', status: 201, also: (b) => b.order_id === v.order ? null : "not the first order" },
      { name: "same key, another user", method: "POST", path: "/skus/tv/orders", headers: { "Idempotency-Key": "ann-1" }, body: '{"user_id":"bob","qty":2}', status: 422, error: "idempotency_mismatch" },
      { name: "bad Idempotency-Key", method: "POST", path: "/skus/tv/orders", headers: { "Idempotency-Key": "bad key!" }, body: '{"user_id":"ann"}', status: 400, error: "bad_request" },
      { name: "limit reached", method: "POST", path: "/skus/tv/orders", body: '{"user_id":"ann"}', status: 409, error: "limit_reached" },
      { name: "not JSON", method: "POST", path: "/skus/tv/orders", body: "not json", status: 400, error: "bad_request" },
      { name: "order with an unknown field", method: "POST", path: "/skus/tv/orders", body: '{"user_id":"carol","qtty":2}', status: 400, error: "bad_request", also: (b) => b.detail.includes("qtty") ? null : `detail '${b.detail}' does not name the field` },
      { name: "qty 0", method: "POST", path: "/skus/tv/orders", body: '{"user_id":"cid","qty":0}', status: 400, error: "bad_request" },
      { name: "order body over 4 KiB", method: "POST", path: "/skus/tv/orders", body: `{"user_id":"ann","pad":"${"x".repeat(5000)}"}`, status: 413, error: "too_large" },
      { name: "order of an unknown SKU", method: "POST", path: "/skus/nosuch/orders", body: '{"user_id":"ann"}', status: 404, error: "not_found" },
      { name: "last unit", method: "POST", path: "/skus/tv/orders", body: '{"user_id":"bob"}', status: 201 },
      { name: "sold out", method: "POST", path: "/skus/tv/orders", body: '{"user_id":"cid"}', status: 409, error: "sold_out" },
      { name: "one order", method: "GET", path: () => `/orders/${v.order}`, status: 200, also: (b) => b.order_id === v.order ? null : "another order" },
      { name: "malformed order id", method: "GET", path: "/orders/12x", status: 400, error: "bad_request" },
      { name: "unknown order", method: "GET", path: "/orders/12345", status: 404, error: "not_found" },
      { name: "audit", method: "GET", path: "/skus/tv/audit", status: 200, also: (b) => b.consistent && b.sold === 3 ? null : "audit not consistent with 3 sold" },
      { name: "audit of an unknown SKU", method: "GET", path: "/skus/nosuch/audit", status: 404, error: "not_found" },
      { name: "SKU of 4 segments of 1", method: "PUT", path: "/skus/ms", headers: admin(), body: '{"stock":4,"segments":4,"per_user_limit":4}', status: 201 },
      { name: "order over several segments", method: "POST", path: "/skus/ms/orders", body: '{"user_id":"dee","qty":4}', status: 201, also: (b) => (b.segments || []).length === 4 ? null : "no 4 segments listed" },
      { name: "SKU whose sale starts in 2099", method: "PUT", path: "/skus/later", headers: admin(), body: '{"stock":3,"starts_at":"2099-01-01T00:00:00+01:00","ends_at":null,"pay_within_ms":0}', status: 201, also: (b) => b.starts_at === "2098-12-31T23:00:00Z" ? null : `starts_at ${b.starts_at}` },
      { name: "order before the sale", method: "POST", path: "/skus/later/orders", body: '{"user_id":"fay"}', status: 409, error: "not_started", also: (b, a) => b.starts_at === "2098-12-31T23:00:00Z" && Number(a.headers["retry-after"]) === 86400 ? null : `starts_at ${b.starts_at}, Retry-After ${a.headers["retry-after"]}` },
      { name: "SKU whose sale ended in 2020", method: "PUT", path: "/skus/past", headers: admin(), body: '{"stock":3,"starts_at":"2020-01-01T00:00:00Z","ends_at":"2020-01-02T00:00:00.5Z"}', status: 201, also: (b) => b.ends_at === "2020-01-02T00:00:00.500Z" ? null : `ends_at ${b.ends_at}` },
      { name: "order after the sale", method: "POST", path: "/skus/past/orders", body: '{"user_id":"fay"}', status: 409, error: "sale_ended", also: (b, a) => a.headers["retry-after"] === undefined ? null : "a Retry-After" },
      { name: "window's end before its start", method: "PUT", path: "/skus/past", headers: admin(), body: '{"stock":3,"starts_at":"2020-01-02T00:00:00Z","ends_at":"2020-01-01T00:00:00Z"}', status: 400, error: "bad_request" },
      { name: "a payment window over a day", method: "PUT", path: "/skus/past", headers: admin(), body: '{"stock":3,"pay_within_ms":86400001}', status: 400, error: "bad_request" },
      { name: "stock report with a window", method: "GET", path: "/skus/past", status: 200, also: (b) => b.starts_at === "2020-01-01T00:00:00Z" && b.pending === 0 ? null : "no window, or pending not 0" },
      { name: "stats", method: "GET", path: "/stats", status: 200 },
      { name: "metrics", method: "GET", path: "/metrics", status: 200 },
      { name: "livez", method: "GET", path: "/livez", status: 200 },
      { name: "readyz", method: "GET", path: "/readyz", status: 200 },
      { name: "SKU to change", method: "PUT", path: "/skus/pz", headers: admin(), body: '{"stock":4,"segments":2}', status: 201 },
      { name: "PATCH without token", method: "PATCH", path: "/skus/pz", body: '{"add":1}', status: 401, error: "unauthorized" },
      { name: "PATCH with an unknown field", method: "PATCH", path: "/skus/pz", headers: admin(), body: '{"restock":1}', status: 400, error: "bad_request" },
      { name: "PATCH of no SKU", method: "PATCH", path: "/skus/nosuch", headers: admin(), body: '{"add":1}', status: 404, error: "not_found" },
      { name: "PATCH pauses and adds", method: "PATCH", path: "/skus/pz", headers: admin(), body: '{"paused":true,"add":2}', status: 200, also: (b) => b.paused === true && b.remaining === 6 && b.withdrawn === 0 ? null : `paused ${b.paused} remaining ${b.remaining}` },
      { name: "order while paused", method: "POST", path: "/skus/pz/orders", body: '{"user_id":"pam"}', status: 409, error: "paused" },
      { name: "PATCH resumes and withdraws", method: "PATCH", path: "/skus/pz", headers: admin(), body: '{"paused":false,"withdraw":5}', status: 200, also: (b) => b.paused === false && b.withdrawn === 5 && b.remaining === 1 ? null : `withdrawn ${b.withdrawn} remaining ${b.remaining}` },
      { name: "wrong method", method: "POST", path: "/skus/tv", body: "{}", status: 405, error: "method_not_allowed", also: (b, a) => a.headers.allow === "PUT, GET, HEAD, PATCH, DELETE" ? null : `Allow: ${a.headers.allow}` },
      { name: "POST on a GET path", method: "POST", path: "/stats", body: "{}", status: 405, error: "method_not_allowed" },
      { name: "unknown path", method: "GET", path: "/nothing/here", status: 404, error: "not_found" },
      { name: "URL of 40 KB", method: "GET", path: "/skus/" + "a".repeat(40000), status: 414, layer: true },
      { name: "header of 40 KB", method: "GET", path: "/livez", headers: { "X-Big": "a".repeat(40000) }, status: 431, layer: true },
      { name: "invalid chunk size", method: "POST", path: "/skus/tv/orders", raw: 'POST /skus/tv/orders HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{"user_id":"chunky"}\r\n0\r\n\r\n', status: 400, layer: true },
      { name: "HTTP/9.9", method: "GET", path: "/livez", raw: "GET /livez HTTP/9.9\r\nHost: x\r\n\r\n", status: 505, layer: true },
      // a body that never arrives whole: 408 once --request-timeout-ms (1.5 s here) passed
      { name: "body cut short", method: "POST", path: "/skus/tv/orders", raw: 'POST /skus/tv/orders HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n{"user_id"', status: 408, error: "request_timeout", layer: "timeout" },
    ]);
    // A test that cannot fail is no test: wrong bodies must be refused.
    const wrong = [
      ["qty as a string", { ...v.orderBody, qty: "2" }],
      ["no order_id", (({ order_id, ...r }) => r)(v.orderBody || {})],
      ["an undocumented field", { ...v.orderBody, color: "red" }],
      ["a state that is none", { ...v.orderBody, state: "sold" }],
    ];
    for (const [what, body] of wrong) {
      const e = schemaCheck("/components/schemas/Order", body);
      if (e) ok(`the validator refuses an order with ${what} (${e})`);
      else fail(`the validator refuses an order with ${what}`, "it accepted it");
    }
    // busy: the segment lock of a fresh SKU held by someone else for 20 s
    await run(base, [{ name: "SKU for busy", method: "PUT", path: "/skus/busy", headers: admin(), body: '{"stock":5,"segments":1}', status: 201 }]);
    // the redis mode's lock is a hash {owner: holds} with a lease (lock/lock_redis.c)
    const r = [await redisCommand(env("REDIS_PORT"), "HSET sk:{busy}:lock:0 intruder 1"),
      await redisCommand(env("REDIS_PORT"), "PEXPIRE sk:{busy}:lock:0 20000")].join(" ");
    if (r !== ":1 :1") fail("segment lock taken by hand", r);
    await run(base, [{ name: "segment lock held elsewhere", method: "POST", path: "/skus/busy/orders", body: '{"user_id":"eve"}', status: 503, error: "busy" }]);
  },
  // Waiting rooms (docs/api.md, "Waiting room"): config, join, poll, pass.
  async room() {
    const base = env("BASE");
    await run(base, [
      { name: "PUT with a waiting room", method: "PUT", path: "/skus/room", headers: admin(), body: '{"stock":3,"room":{"rate_per_s":50,"max_active":10,"pass_ttl_ms":60000}}', status: 201, also: (b) => b.room && b.room.rate_per_s === 50 && b.room.max_active === 10 ? null : `room ${JSON.stringify(b.room)}` },
      { name: "PUT with a bad room", method: "PUT", path: "/skus/room", headers: admin(), body: '{"stock":3,"room":{"rate_per_s":0}}', status: 400, error: "bad_request" },
      { name: "stock report with a room", method: "GET", path: "/skus/room", status: 200, also: (b) => b.room && b.room.pass_ttl_ms === 60000 ? null : `room ${JSON.stringify(b.room)}` },
      { name: "join", method: "POST", path: "/skus/room/queue", body: '{"user_id":"ann"}', status: 202, after: (b) => { v.ticket = b.ticket; } },
      { name: "join again: the same ticket", method: "POST", path: "/skus/room/queue", body: '{"user_id":"ann"}', status: 202, also: (b) => b.ticket === v.ticket ? null : "another ticket" },
      { name: "join without user_id", method: "POST", path: "/skus/room/queue", body: "{}", status: 400, error: "bad_request" },
      { name: "join a SKU without a room", method: "POST", path: "/skus/tv/queue", body: '{"user_id":"ann"}', status: 404, error: "no_room" },
      { name: "join an unknown SKU", method: "POST", path: "/skus/nosuch/queue", body: '{"user_id":"ann"}', status: 404, error: "not_found" },
      { name: "poll a ticket that is none", method: "GET", path: "/skus/room/queue/abc.def.ghi", status: 400, error: "bad_request" },
      { name: "the room's page", method: "GET", path: "/skus/room/room", status: 200, also: (b) => b.includes("Seckill-Pass") ? null : "no Seckill-Pass in the page" },
      { name: "the page of a SKU without a room", method: "GET", path: "/skus/tv/room", status: 404, error: "no_room" },
      { name: "order without a pass", method: "POST", path: "/skus/room/orders", body: '{"user_id":"ann"}', status: 403, error: "not_admitted", also: (b) => b.detail.startsWith("missing") ? null : b.detail },
    ]);
    // admitted within a few ticks (50 a second, a tick every 100 ms): 5 s for a busy box
    for (const until = Date.now() + 5000; Date.now() < until; ) {
      const a = await send(base, { method: "GET", path: `/skus/room/queue/${v.ticket}` });
      if (a.status === 200 && JSON.parse(a.body).state === "admitted") break;
      await new Promise((res) => setTimeout(res, 100));
    }
    await run(base, [
      { name: "poll: admitted, with a pass", method: "GET", path: () => `/skus/room/queue/${v.ticket}`, status: 200, also: (b) => b.state === "admitted" && b.pass && b.pass_expires_at ? null : JSON.stringify(b), after: (b) => { v.pass = b.pass; } },
    ]);
    await run(base, [
      { name: "order of another user with the pass", method: "POST", path: "/skus/room/orders", headers: { "Seckill-Pass": v.pass }, body: '{"user_id":"bob"}', status: 403, error: "not_admitted" },
      { name: "order with the pass", method: "POST", path: "/skus/room/orders", headers: { "Seckill-Pass": v.pass }, body: '{"user_id":"ann"}', status: 201 },
    ]);
  },
  async lost() {
    // The SKU is made through the other instance: the proxy loses the answer of
    // the first command that carries an order key, which a reset's wipe is too.
    await run(env("BASE"), [
      { name: "SKU for the lossy instance", method: "PUT", path: "/skus/lost", headers: admin(), body: '{"stock":5,"segments":2}', status: 201 },
    ]);
    await run(env("LOST_BASE"), [
      { name: "commit answer lost", method: "POST", path: "/skus/lost/orders", headers: { "Idempotency-Key": "lost-1" }, body: '{"user_id":"lou"}', status: 503, error: "outcome_unknown", also: (b) => b.order_id ? null : "no order_id" },
    ]);
    // setnx has no read-write lock for a merchant's change
    await run(env("SETNX_BASE"), [
      { name: "PATCH under setnx", method: "PATCH", path: "/skus/lost", headers: admin(), body: '{"paused":true}', status: 501, error: "not_implemented" },
    ]);
  },
  // Reservations: pay, cancel and their refusals. After the lost phase: its proxy
  // loses the answer of the first command naming an order key, which a sweep of a
  // SKU with a payment window is too.
  async life() {
    const base = env("BASE");
    await run(base, [
      { name: "SKU with a payment window", method: "PUT", path: "/skus/res", headers: admin(), body: '{"stock":5,"segments":2,"pay_within_ms":60000}', status: 201, also: (b) => b.pay_within_ms === 60000 ? null : `pay_within_ms ${b.pay_within_ms}` },
      { name: "a reservation", method: "POST", path: "/skus/res/orders", body: '{"user_id":"ivy"}', status: 201, also: (b) => b.state === "pending" && b.pay_by ? null : `state ${b.state}, pay_by ${b.pay_by}`, after: (b) => { v.res = b.order_id; } },
      { name: "pay without token", method: "POST", path: () => `/orders/${v.res}/pay`, status: 401, error: "unauthorized" },
      { name: "cancel by another user", method: "POST", path: () => `/orders/${v.res}/cancel`, body: '{"user_id":"zed"}', status: 403, error: "forbidden" },
      { name: "cancel without user_id", method: "POST", path: () => `/orders/${v.res}/cancel`, body: '{}', status: 400, error: "bad_request" },
      { name: "pay", method: "POST", path: () => `/orders/${v.res}/pay`, headers: admin(), body: '{"payment_id":"psp-1"}', status: 200, also: (b) => b.state === "paid" ? null : `state ${b.state}` },
      { name: "pay again", method: "POST", path: () => `/orders/${v.res}/pay`, headers: admin(), status: 200, also: (b) => b.payment_id === "psp-1" && b.paid_at ? null : `payment_id ${b.payment_id}, paid_at ${b.paid_at}` },
      { name: "pay with another payment_id", method: "POST", path: () => `/orders/${v.res}/pay`, headers: admin(), body: '{"payment_id":"psp-2"}', status: 409, error: "paid", also: (b) => b.payment_id === "psp-1" ? null : `payment_id ${b.payment_id}` },
      { name: "the paid order", method: "GET", path: () => `/orders/${v.res}`, status: 200, also: (b) => b.payment_id === "psp-1" && b.paid_at ? null : `payment_id ${b.payment_id}, paid_at ${b.paid_at}` },
      { name: "PUT of a SKU with a paid order", method: "PUT", path: "/skus/res", headers: admin(), body: '{"stock":5,"segments":2,"pay_within_ms":60000}', status: 409, error: "exists" },
      { name: "PUT with a bad reset", method: "PUT", path: "/skus/res?reset=yes", headers: admin(), body: '{"stock":5,"segments":2,"pay_within_ms":60000}', status: 400, error: "bad_request" },
      { name: "cancel of a paid order", method: "POST", path: () => `/orders/${v.res}/cancel`, body: '{"user_id":"ivy"}', status: 409, error: "paid" },
      { name: "another reservation", method: "POST", path: "/skus/res/orders", body: '{"user_id":"jay"}', status: 201, after: (b) => { v.res2 = b.order_id; } },
      { name: "cancel", method: "POST", path: () => `/orders/${v.res2}/cancel`, body: '{"user_id":"jay"}', status: 200, also: (b) => b.state === "cancelled" ? null : `state ${b.state}` },
      { name: "pay of a cancelled order", method: "POST", path: () => `/orders/${v.res2}/pay`, headers: admin(), status: 409, error: "cancelled" },
      { name: "a third reservation", method: "POST", path: "/skus/res/orders", body: '{"user_id":"kim"}', status: 201, after: (b) => { v.res3 = b.order_id; } },
      { name: "retire with a reservation pending", method: "DELETE", path: "/skus/res", headers: admin(), status: 409, error: "not_settled" },
    ]);
    const late = await recordSet(env("REDIS_PORT"), String(v.res3), "pay_by", "1");
    if (late !== ":1") fail("pay_by moved to the past by hand", late);
    await run(base, [
      { name: "pay after pay_by", method: "POST", path: () => `/orders/${v.res3}/pay`, headers: admin(), status: 409, error: "expired" },
      { name: "pay of an order without a payment window", method: "POST", path: () => `/orders/${v.order}/pay`, headers: admin(), status: 409, error: "not_pending" },
      { name: "pay of an unknown order", method: "POST", path: "/orders/12345/pay", headers: admin(), status: 404, error: "not_found" },
      { name: "pay with a bad payment_id", method: "POST", path: () => `/orders/${v.res}/pay`, headers: admin(), body: '{"payment_id":"a b"}', status: 400, error: "bad_request" },
      { name: "stock report of reservations", method: "GET", path: "/skus/res", status: 200, also: (b) => b.paid === 1 && b.returned === 2 && b.remaining === 4 ? null : `paid ${b.paid}, returned ${b.returned}, remaining ${b.remaining}` },
      { name: "audit of reservations", method: "GET", path: "/skus/res/audit", status: 200, also: (b) => b.consistent && b.cancelled === 1 && b.expired === 1 ? null : JSON.stringify(b) },
      { name: "retire without the admin token", method: "DELETE", path: "/skus/res", status: 401, error: "unauthorized" },
      { name: "retire, every reservation ended", method: "DELETE", path: "/skus/res", headers: admin(), status: 204 },
      { name: "stock report of a retired SKU", method: "GET", path: "/skus/res", status: 404, error: "not_found" },
      { name: "retire again", method: "DELETE", path: "/skus/res", headers: admin(), status: 404, error: "not_found" },
    ]);
  },
  async down() {
    const base = env("BASE");
    await run(base, [
      { name: "order, Redis down", method: "POST", path: "/skus/tv/orders", body: '{"user_id":"dan"}', status: 503, error: "unavailable" },
      { name: "stock report, Redis down", method: "GET", path: "/skus/tv", status: 503, error: "unavailable" },
      // api.md: a Redis gone turns /readyz 503 within about 1.25 s (its answers are
      // checked every 250 ms, each given 1 s); 2 s, for a sanitizer's build
      { name: "readyz, Redis down", method: "GET", path: "/readyz", status: 503, error: "unavailable", within: 2000 },
    ]);
  },
  async coverage() { // every route answered; every status and error of api.md's tables seen
    for (const [t, item] of Object.entries(doc.paths))
      for (const m of ["get", "put", "post", "delete", "patch"])
        if (item[m]) {
          const key = `${m.toUpperCase()} ${t}`;
          if (state.ops[key]) ok(`a real answer of ${key} validated`);
          else fail(`a real answer of ${key} validated`, "none");
        }
    const md = readFileSync(env("CONTRACT_API_MD"), "utf8");
    const rows = [...md.matchAll(/^\| (\d{3}) \| `([a-z_]+)`/gm)];
    if (rows.length < 10) fail("api.md's error table read", `${rows.length} rows`);
    for (const [, st, err] of rows) {
      if (state.errors[`${st} ${err}`]) ok(`api.md's ${st} ${err} seen and valid`);
      else fail(`api.md's ${st} ${err} seen and valid`, "never answered");
    }
    const html = [...md.matchAll(/^\| (\d{3}) \| — \(HTML\)/gm)];
    if (html.length < 4) fail("api.md's table of the HTTP library's refusals read", `${html.length} rows`);
    for (const [, st] of html) {
      if (state.seen[`${st} html`]) ok(`api.md's ${st} (HTML, the HTTP library's) seen and valid`);
      else fail(`api.md's ${st} (HTML, the HTTP library's) seen and valid`, "never answered");
    }
  },
};

const phase = process.argv[2];
if (!phases[phase]) {
  console.log(`FAIL - unknown phase '${phase}'`);
  process.exit(1);
}
try {
  await phases[phase]();
} catch (e) {
  fail(`phase ${phase}`, e.stack);
}
writeFileSync(statePath, JSON.stringify(state));
process.exit(failed ? 1 : 0);
