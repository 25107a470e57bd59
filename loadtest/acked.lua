-- acked.lua — wrk script: orders as orders.lua places them (a fresh user per request,
-- qty 1), and every answer written down, so that a test can check what the service
-- acknowledged against what it holds afterwards.
--
--   wrk -t2 -c16 -d5s -s loadtest/acked.lua http://127.0.0.1:PORT -- SKU OUT [TAG]
--
--   SKU   the SKU to buy
--   OUT   each thread appends to OUT.<thread>: one line per answer, "201 <order_id>
--         <order_id>", else "<status> <error> <order_id or ->" (outcome_unknown names
--         its order); flushed as it goes, so the lines are there whatever happens to wrk
--   TAG   user id prefix (default "a"); use a new one per run

local counter = 0

function setup(thread)
    counter = counter + 1
    thread:set("tid", counter)
end

local sku, out, tag, n

function init(args)
    sku = args[1] or "demo"
    out = assert(io.open((args[2] or "acked") .. "." .. tid, "a"))
    tag = args[3] or "a"
    n = 0
end

function request()
    n = n + 1
    local body = string.format('{"user_id":"%s-t%d-%d"}', tag, tid, n)
    return wrk.format("POST", "/skus/" .. sku .. "/orders",
        {["Content-Type"] = "application/json"}, body)
end

function response(status, headers, body)
    local id = body:match('"order_id":"(%d+)"') or "-"
    local err = body:match('"error":"([%w_]+)"') or "-"
    out:write(status, " ", status == 201 and id or err, " ", id, "\n")
    out:flush()
end
