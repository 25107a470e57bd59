-- orders.lua — wrk script: every request places one order, POST /skus/{sku}/orders.
--
--   wrk -t2 -c32 -d5s -s loadtest/orders.lua http://127.0.0.1:PORT -- SKU [USERS] [QTY] [TAG] [TAIL]
--       [PAY_RATIO PAY_DELAY_MS ADMIN_TOKEN]
--
--   SKU    the SKU to buy (default "demo")
--   USERS  0 (default): a fresh user per request, "<TAG>-t<thread>-<n>", so each user
--          buys once and only stock limits the sale;
--          N > 0: users drawn at random from a pool of N ("<TAG>-u<k>"), so users
--          come back and the per-user limit is exercised
--   QTY    units per order (default 1); a range A-B (e.g. 1-3): each order asks a
--          random quantity in it
--   TAG    user id prefix (default "w"); use a new one per run
--   TAIL   "tail": also time the end of the sale (tail_s below); it keeps the time of
--          every 201, so leave it out for long runs ("-": no)
--   PAY_RATIO, PAY_DELAY_MS, ADMIN_TOKEN
--          for a SKU with a payment window: each buyer of a 201 pays with probability
--          PAY_RATIO, PAY_DELAY_MS after the answer (POST /orders/{id}/pay, with the
--          admin token when one is given); the others cancel (half of them, after
--          the same delay) or walk away and let the order expire. The thread's next
--          request after the delay is that pay or cancel instead of an order.
--
-- SECKILL_BUYER_KEY_FILE (environment): the instances' --buyer-key-file. Each order
-- and cancel then carries Seckill-Buyer, a token for its user made here as the
-- instances check it (HMAC-SHA256 keyed with the file's bytes, a final newline
-- dropped, over "<user>.<expiry>", hex; libcrypto through LuaJIT's FFI), valid for an
-- hour.
--
-- Answers are counted per outcome in each thread; done() prints one JSON line starting
-- with {"tool":"wrk-orders" holding the counts, units_201 (the units the 201 answers
-- placed, from their "qty"), req/s, latency percentiles (ms) and selling_s, the
-- seconds from the first request to the last 201 (-1 when unknown), and with TAIL
-- tail_s, the seconds it took to sell the last 10% of the units placed (-1 without).
-- With PAY_RATIO: paid, cancelled (their 200s), late (409 expired: paid or cancelled
-- after pay_by) and walked (orders left to expire).

local threads = {}

-- A monotonic clock through LuaJIT's FFI (wrk embeds LuaJIT); nil where unavailable.
local now
do
    local ok, ffi = pcall(require, "ffi")
    if ok then
        ok = pcall(ffi.cdef, [[
            typedef struct { long tv_sec; long tv_nsec; } orders_timespec;
            int clock_gettime(int clk, orders_timespec *ts);
        ]])
    end
    if ok then
        local ts = ffi.new("orders_timespec")
        now = function()
            ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC: comparable across threads
            return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) / 1e9
        end
    end
end

-- buyer_token(user): the Seckill-Buyer token of user; nil without a key file.
local buyer_token
do
    local file = os.getenv("SECKILL_BUYER_KEY_FILE")
    if file and file ~= "" then
        local f = assert(io.open(file, "rb"))
        local key = string.gsub(f:read("*a"), "\n$", "")
        f:close()
        local ffi = require("ffi")
        ffi.cdef([[
            typedef struct evp_md_st EVP_MD;
            const EVP_MD *EVP_sha256(void);
            unsigned char *HMAC(const EVP_MD *md, const void *key, int key_len,
                                const unsigned char *d, size_t n, unsigned char *out,
                                unsigned int *out_len);
        ]])
        local ok, crypto = pcall(ffi.load, "crypto")
        if not ok then crypto = ffi.load("libcrypto.so.3") end
        local out, len = ffi.new("unsigned char[32]"), ffi.new("unsigned int[1]")
        local hex = {}
        for i = 0, 255 do hex[i] = string.format("%02x", i) end
        local sig = {}
        buyer_token = function(user)
            local msg = user .. "." .. (os.time() + 3600)
            crypto.HMAC(crypto.EVP_sha256(), key, #key, msg, #msg, out, len)
            for i = 0, 31 do sig[i + 1] = hex[out[i]] end
            return msg .. "." .. table.concat(sig)
        end
    end
end

-- The headers of a buyer's request: its token when there is a key.
local function buyer_headers(user)
    local h = { ["Content-Type"] = "application/json" }
    if buyer_token then h["Seckill-Buyer"] = buyer_token(user) end
    return h
end

-- Runs in the main Lua state once per thread, before the threads start.
function setup(thread)
    table.insert(threads, thread)
    thread:set("thread_no", #threads)
end

-- Per-thread state. The n_* globals are read back by done() through thread:get().
local path, users, qty_lo, qty_hi, tag, tail
t201, u201 = {}, {} -- with TAIL: the time and units of every 201, in order
local counter = 0
local headers = { ["Content-Type"] = "application/json" }
n_units = 0 -- units placed: the sum of the 201 answers' qty
n_201, n_sold_out, n_limit, n_busy, n_unavailable, n_409_other, n_503_other = 0, 0, 0, 0, 0, 0, 0
n_unknown = 0 -- 503 outcome_unknown: the commit was sent, its answer lost (may be placed)
n_other = 0
n_paid, n_cancelled, n_late, n_walked = 0, 0, 0, 0 -- with PAY_RATIO
local pay_ratio, pay_delay, pay_headers = 0, 0, nil
-- pays and cancels due: {at, path, body}, in due order, owed[owed_head..owed_tail]
-- (explicit ends: # is not defined on a table whose front was taken)
local owed, owed_head, owed_tail = {}, 1, 0
other_codes = "" -- "code:count,..." of the answers none of the above describe
t_first, t_last_201 = -1, -1 -- monotonic seconds: first request sent, last 201 received
local other = {}

function init(args)
    local sku = args[1] or "demo"
    users = tonumber(args[2] or "0") or 0
    local lo, hi = string.match(args[3] or "1", "^(%d+)%-(%d+)$")
    qty_lo = tonumber(lo or args[3] or "1") or 1
    qty_hi = math.max(qty_lo, tonumber(hi or qty_lo))
    tag = args[4] or "w"
    tail = args[5] == "tail"
    pay_ratio = tonumber(args[6] or "0") or 0
    pay_delay = (tonumber(args[7] or "0") or 0) / 1000
    pay_headers = { ["Content-Type"] = "application/json" }
    if args[8] and args[8] ~= "" then pay_headers["Authorization"] = "Bearer " .. args[8] end
    path = "/skus/" .. sku .. "/orders"
    math.randomseed(os.time() * 1000 + (thread_no or 0) * 7919)
end

function request()
    local due = owed[owed_head]
    if due and now and now() >= due[1] then -- a buyer's pay or cancel
        owed[owed_head] = nil
        owed_head = owed_head + 1
        return wrk.format("POST", due[2], due[4] or pay_headers, due[3])
    end
    counter = counter + 1
    if counter == 1 and now then t_first = now() end
    local user
    if users > 0 then
        user = tag .. "-u" .. math.random(users)
    else
        user = tag .. "-t" .. (thread_no or 0) .. "-" .. counter
    end
    local qty = qty_lo == qty_hi and qty_lo or math.random(qty_lo, qty_hi)
    local body = '{"user_id":"' .. user .. '","qty":' .. qty .. '}'
    return wrk.format("POST", path, buyer_token and buyer_headers(user) or headers, body)
end

local function has(body, word)
    return body ~= nil and string.find(body, '"' .. word .. '"', 1, true) ~= nil
end

-- A buyer's next step after a 201 of a reservation: pay, cancel, or nothing.
local function buyer_decides(body)
    local id = string.match(body or "", '"order_id":%s*"(%d+)"')
    local user = string.match(body or "", '"user_id":%s*"([^"]+)"')
    if not id or not user or not now then return end
    local step, body, hdrs
    if math.random() < pay_ratio then
        step, body = "/pay", ""
    elseif math.random() < 0.5 then
        step, body = "/cancel", '{"user_id":"' .. user .. '"}'
        hdrs = buyer_token and buyer_headers(user)
    else
        n_walked = n_walked + 1
        return
    end
    owed_tail = owed_tail + 1
    owed[owed_tail] = { now() + pay_delay, "/orders/" .. id .. step, body, hdrs }
end

function response(status, hdrs, body)
    if status == 201 then
        if pay_ratio > 0 and has(body, "pending") then buyer_decides(body) end
        n_201 = n_201 + 1
        local units = tonumber(string.match(body or "", '"qty":%s*(%d+)')) or 0
        n_units = n_units + units
        if now then t_last_201 = now() end
        if tail and now then
            t201[#t201 + 1] = t_last_201
            u201[#u201 + 1] = units
        end
    elseif status == 200 then -- a pay or a cancel
        if has(body, "paid") then
            n_paid = n_paid + 1
        elseif has(body, "cancelled") then
            n_cancelled = n_cancelled + 1
        else
            n_other = n_other + 1
        end
    elseif status == 409 then
        if has(body, "sold_out") then
            n_sold_out = n_sold_out + 1
        elseif has(body, "limit_reached") then
            n_limit = n_limit + 1
        elseif has(body, "expired") then -- a pay or a cancel after pay_by
            n_late = n_late + 1
        else
            n_409_other = n_409_other + 1
        end
    elseif status == 503 then
        if has(body, "busy") then
            n_busy = n_busy + 1
        elseif has(body, "unavailable") then
            n_unavailable = n_unavailable + 1
        elseif has(body, "outcome_unknown") then
            n_unknown = n_unknown + 1
        else
            n_503_other = n_503_other + 1
        end
    else
        n_other = n_other + 1
        other[status] = (other[status] or 0) + 1
        local parts = {}
        for code, n in pairs(other) do
            table.insert(parts, code .. ":" .. n)
        end
        table.sort(parts)
        other_codes = table.concat(parts, ",")
    end
end

local function ms(us)
    return (us or 0) / 1000.0
end

-- The seconds from the 201 that brought the units placed to 90% of their total to
-- the last 201, over every thread's 201s (-1 when none were timed).
local function tail_seconds()
    local sales = {}
    for _, t in ipairs(threads) do
        local times, units = t:get("t201") or {}, t:get("u201") or {}
        for i, at in ipairs(times) do sales[#sales + 1] = { at, units[i] or 0 } end
    end
    if #sales == 0 then return -1 end
    table.sort(sales, function(a, b) return a[1] < b[1] end)
    local total = 0
    for _, s in ipairs(sales) do total = total + s[2] end
    local sold = 0
    for _, s in ipairs(sales) do
        sold = sold + s[2]
        if sold >= 0.9 * total then return sales[#sales][1] - s[1] end
    end
    return -1
end

function done(summary, latency, requests)
    local names = { "n_201", "n_units", "n_sold_out", "n_limit", "n_busy", "n_unavailable",
                    "n_unknown", "n_409_other", "n_503_other", "n_other", "n_paid",
                    "n_cancelled", "n_late", "n_walked" }
    local total = {}
    for _, name in ipairs(names) do total[name] = 0 end
    local merged = {}
    local first, last = nil, nil
    for _, t in ipairs(threads) do
        local tf, tl = tonumber(t:get("t_first")) or -1, tonumber(t:get("t_last_201")) or -1
        if tf >= 0 and (first == nil or tf < first) then first = tf end
        if tl >= 0 and (last == nil or tl > last) then last = tl end
        for _, name in ipairs(names) do
            total[name] = total[name] + (tonumber(t:get(name)) or 0)
        end
        local codes = t:get("other_codes") or ""
        for code, n in string.gmatch(codes, "(%d+):(%d+)") do
            merged[code] = (merged[code] or 0) + tonumber(n)
        end
    end
    local codes = {}
    for code, n in pairs(merged) do
        table.insert(codes, string.format('"%s":%d', code, n))
    end
    table.sort(codes)
    -- Seconds from the first request to the last 201: how long selling took.
    local selling = (first and last and last >= first) and (last - first) or -1
    local secs = summary.duration / 1e6
    local e = summary.errors
    io.write(string.format(
        '{"tool":"wrk-orders","threads":%d,"requests":%d,"duration_s":%.3f,' ..
        '"req_per_s":%.1f,"p50_ms":%.3f,"p90_ms":%.3f,"p99_ms":%.3f,"max_ms":%.3f,' ..
        '"selling_s":%.3f,"tail_s":%.3f,' ..
        '"status_201":%d,"units_201":%d,"sold_out":%d,"limit_reached":%d,"busy":%d,"unavailable":%d,' ..
        '"outcome_unknown":%d,' ..
        '"other_409":%d,"other_503":%d,"other":%d,"other_codes":{%s},' ..
        '"paid":%d,"cancelled":%d,"late":%d,"walked":%d,' ..
        '"socket_errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d}}\n',
        #threads, summary.requests, secs, secs > 0 and summary.requests / secs or 0,
        ms(latency:percentile(50)), ms(latency:percentile(90)), ms(latency:percentile(99)),
        ms(latency.max), selling, tail_seconds(),
        total.n_201, total.n_units, total.n_sold_out, total.n_limit, total.n_busy, total.n_unavailable,
        total.n_unknown, total.n_409_other, total.n_503_other, total.n_other, table.concat(codes, ","),
        total.n_paid, total.n_cancelled, total.n_late, total.n_walked,
        e.connect, e.read, e.write, e.timeout))
end
