-- wrk script for podium's benchmarks: POSTs AdmissionReview bodies and prints one JSON line.
--   wrk ... -s bench/throughput/load.lua URL -- BODIES MODE [PREFIX] [LIMIT]
-- BODIES: a file with one compact JSON body per line.
-- MODE "cycle": send the bodies in turn.
-- MODE "fresh": every request a new job: "@JOB@" in the (first) body is replaced by
--               PREFIX-<counter>, so each review is the first pod of its own job.
-- LIMIT: stop after this many responses (a burst of a fixed size); 0 or absent: run for -d.
local bodies, mode, prefix, limit = {}, "cycle", "j", 0
local counter, responses = 0, 0
local headers = {["Content-Type"] = "application/json"}

function init(args)
  for line in io.lines(args[1]) do
    if #line > 0 then bodies[#bodies + 1] = line end
  end
  mode = args[2] or "cycle"
  prefix = args[3] or "j"
  limit = tonumber(args[4] or "0")
end

function request()
  counter = counter + 1
  local body
  if mode == "fresh" then
    body = string.gsub(bodies[1], "@JOB@", prefix .. "-" .. counter)
  else
    body = bodies[(counter - 1) % #bodies + 1]
  end
  return wrk.format("POST", nil, headers, body)
end

if true then
  response = function(status, hdrs, body)
    responses = responses + 1
    if status ~= 200 then
      io.stderr:write("status " .. status .. "\n")
    end
    if limit > 0 and responses >= limit then
      wrk.thread:stop()
    end
  end
end

function done(summary, latency, requests)
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "errors": %d, "p50_us": %d, "p99_us": %d, "max_us": %d, "mean_us": %.1f}\n',
    summary.requests, summary.duration,
    summary.errors.connect + summary.errors.read + summary.errors.write
      + summary.errors.status + summary.errors.timeout,
    latency:percentile(50), latency:percentile(99), latency.max, latency.mean))
end
