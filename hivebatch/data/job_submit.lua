-- hivebatch's job_submit plugin logic (Slurm job_submit/lua, Lua 5.1).
--
-- `hadmin slurm-config` writes job_submit.lua next to slurm.conf: the site table HIVEBATCH_SITE
-- (GPU types, VCs, classes, Operator uids; generated from the hivebatch config) followed by this file.
-- The part of it the config decides is taken from the controller's node sizes file while that is
-- fresh (site()), so that an edit of the config counts without this file being written again.
--
-- Every job from a non-Operator user that asks for GPUs in any form Slurm accepts becomes a hivebatch
-- request: the GPU ask is taken off the job, written into the admin comment (only SlurmUser/root and
-- this plugin can set it) and the job is held with priority 0, an admin hold only an Operator can
-- release. The controller later pins the job to the GPU indices its cells chose and releases it.
-- Any error inside this file refuses the job (fail closed): slurmctld itself would let a job through
-- when the Lua function raises, so every entry point runs under pcall.

local SITE = HIVEBATCH_SITE
local PREFIX = "hivebatch:v2:"
-- begin time a job gets when its owner releases their own hold: far enough that Slurm never starts
-- it, so the controller sees "released by the owner" and takes the job back under its own hold
local RELEASED_BEGIN = 4102444800 -- 2100-01-01
-- begin time of a waiting GPU job its owner held after submitting it (scontrol hold/uhold): to Slurm
-- the plugin's own hold is the same user hold, so the controller tells the two apart by this
local HELD_BEGIN = RELEASED_BEGIN + 86400
-- begin time of a hivebatch job an admin held (scontrol hold): the controller's own holds are admin
-- holds too, so the controller holds with CONTROLLER_HOLD as the begin time, which is dropped here (or
-- becomes RELEASED_BEGIN for a job that kept the GPUs of an earlier pin);
-- a hold without it is an admin's, which the controller must leave until an admin releases the job
local ADMIN_HELD_BEGIN = RELEASED_BEGIN + 2 * 86400
local CONTROLLER_HOLD = RELEASED_BEGIN + 3 * 86400
local INFINITE = 4294967295
local NO_VAL = 4294967294
local NO_VAL16 = 65534

local M = {}
-- what the submission changed that its owner should know, told once it is accepted
local NOTES = {}
-- the --gpus total round_up raised to the same GPUs on every node, while a submission is checked
local ROUNDED = nil
-- the job's task count when it asks GPUs per task, while a submission is checked
local TASKS = nil
-- what a submission or update is checked against that the config decides (GPU types and nodes, VCs,
-- limits: the keys of FOLLOWED), read once per entry point when first needed (site, defined with the
-- controller's files below); the rest of SITE is this file's own
local CURRENT = nil
local site
-- the controller's node sizes file as this entry point read it ({data, why}): read once, as both the
-- size test and site() want it and slurmctld waits for the plugin (1.3 ms a read at 512 nodes)
local NODES_READ = nil

local function is_set(n)
  return n ~= nil and n ~= NO_VAL and n ~= INFINITE and n ~= NO_VAL16 and n ~= 65535
end

-- a Lua number is a double: concatenated, --mem=99999999T read "1.0485759895142e+14 MB"
local function whole(n)
  return string.format("%.0f", n)
end

local function fail(msg)
  error({ hivebatch = msg }, 0)
end

-- "gres:gpu:v100:2,gres:shard:8,license/x:1" -> list of {name=, type=, count=, text=}
-- Slurm 22.05 writes "gres:NAME[:TYPE][:COUNT]" (older clients "gres/NAME"); a bare "NAME[:TYPE][:COUNT]"
-- is accepted too, as "gres" would be written through the old field.
function M.parse_tres(text)
  local items = {}
  if text == nil or text == "" then
    return items
  end
  for part in string.gmatch(text, "[^,]+") do
    local body = part:gsub("^gres[:/]", "")
    local fields = {}
    for f in string.gmatch(body, "[^:]+") do
      fields[#fields + 1] = f
    end
    local name, typ, count = fields[1], nil, 1
    if #fields == 2 then
      if fields[2]:match("^%d+$") then
        count = tonumber(fields[2])
      else
        typ = fields[2]
      end
    elseif #fields >= 3 then
      typ = fields[2]
      if not fields[3]:match("^%d+$") then
        fail("cannot read the GPU count in '" .. part .. "': write gpu[:TYPE]:COUNT")
      end
      count = tonumber(fields[3])
    end
    if #fields > 3 then
      fail("cannot read '" .. part .. "': write gpu[:TYPE]:COUNT")
    end
    items[#items + 1] = { name = name, type = typ, count = count, text = part }
  end
  return items
end

local function is_gpu(item)
  return item.name == "gpu" or item.name == "shard"
end

-- split a TRES list into its GPU items and the text of the others (kept on the job)
local function split_gpu(text)
  local gpu, rest = {}, {}
  for _, item in ipairs(M.parse_tres(text)) do
    -- Slurm takes a zero count (--gres=gpu:0, --gpus=0, as job templates write "no GPU") as no GPU at
    -- all (recorded: tests/fixtures/slurm/zero_gpus_accepted.txt): such a job is a CPU job here too
    if is_gpu(item) and item.count > 0 then
      gpu[#gpu + 1] = item
    else
      rest[#rest + 1] = item.text
    end
  end
  return gpu, table.concat(rest, ",")
end

-- one GPU figure (name=gpu) and one memory slice (name=shard) per field, one GPU type for the job
local function sum_items(items, where, req)
  local gpus, shards = nil, nil
  for _, item in ipairs(items) do
    if item.type ~= nil then
      local t = site().gpu_types[string.lower(item.type)]
      if t == nil then
        fail("GPU type '" .. item.type .. "' in " .. where .. " is not on this cluster (types: " .. site().type_list .. ")")
      end
      if req.gpu_type ~= nil and req.gpu_type ~= t.name then
        fail("a job can ask for one GPU type only, not " .. req.gpu_type .. " and " .. t.name)
      end
      req.gpu_type = t.name
    end
    if item.name == "gpu" then
      gpus = (gpus or 0) + item.count
    else
      shards = (shards or 0) + item.count
    end
  end
  return gpus, shards
end

local function json_value(v)
  if type(v) == "number" then
    return string.format("%d", v)
  end
  return '"' .. tostring(v):gsub('[%c"\\|]', function(c)
    return string.format("\\u%04x", string.byte(c))
  end) .. '"'
end

-- a flat table as JSON with sorted keys, so the same request always reads the same
local function flat_json(t)
  local keys = {}
  for k in pairs(t) do
    keys[#keys + 1] = k
  end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    parts[#parts + 1] = '"' .. k .. '":' .. json_value(t[k])
  end
  return "{" .. table.concat(parts, ",") .. "}"
end

function M.encode(req)
  return PREFIX .. flat_json(req)
end

local function get(job_desc, name)
  local ok, v = pcall(function()
    return job_desc[name]
  end)
  if ok then
    return v
  end
  return nil
end

-- the GPU items of each TRES field that has some, and what the field keeps without them
local function gpu_fields(job_desc)
  local found, rest = {}, {}
  for _, f in ipairs({ "tres_per_job", "tres_per_node", "tres_per_task", "tres_per_socket" }) do
    local items, others = split_gpu(get(job_desc, f))
    if #items > 0 then
      found[f], rest[f] = items, others
    end
  end
  return found, rest
end

-- the per-node GPU count and node count of an ask, where Slurm's fields fix them
local function shape(job_desc, found, req)
  local min_nodes, max_nodes = get(job_desc, "min_nodes"), get(job_desc, "max_nodes")
  local nodes = nil
  if min_nodes == 0 and (not is_set(max_nodes) or max_nodes == 0) then
    -- slurmctld refuses it in its own words; counted here, it read as "needs at least one GPU"
    fail("Node count specification invalid: -N/--nodes 0 asks for no node; a job runs on one at least")
  end
  if is_set(min_nodes) and (not is_set(max_nodes) or max_nodes == min_nodes) then
    nodes = min_nodes
  elseif is_set(min_nodes) and min_nodes > 1 then
    -- -N 2-3: Slurm takes as many nodes of the range as are free (recorded:
    -- tests/fixtures/slurm/node_range.txt); a placement here has one node count, and the fewest
    -- the owner allows is one Slurm could give as well. Left open, the job ran on one node.
    nodes = min_nodes
    NOTES[#NOTES + 1] = "-N " .. min_nodes .. "-" .. max_nodes .. " runs on " .. min_nodes .. " nodes, the fewest it allows: a job gets one node count here"
  end
  local per_node, total, shards = nil, nil, nil
  if found.tres_per_node then
    per_node, shards = sum_items(found.tres_per_node, "--gres/--gpus-per-node", req)
  end
  if found.tres_per_job then
    local g, s = sum_items(found.tres_per_job, "--gpus", req)
    total, shards = g, shards or s
  end
  if found.tres_per_task then
    local g = sum_items(found.tres_per_task, "--gpus-per-task", req)
    local ntasks, per_node_tasks = get(job_desc, "num_tasks"), get(job_desc, "ntasks_per_node")
    if g ~= nil and is_set(per_node_tasks) then
      per_node = g * per_node_tasks
    elseif g ~= nil and is_set(ntasks) then
      total = g * ntasks
      if ntasks > 1 then
        -- on several nodes each holds whole tasks: the controller and round_up keep to that
        req.gpus_per_task = g
        TASKS = ntasks
      end
    elseif g ~= nil then
      total = g
    end
  end
  if found.tres_per_socket then
    local g = sum_items(found.tres_per_socket, "--gpus-per-socket", req)
    local sockets = get(job_desc, "sockets_per_node")
    if g ~= nil then
      per_node = g * (is_set(sockets) and sockets or 1)
      if per_node > g then
        -- the cells pack a job's GPUs into the smallest cell that holds them (one PCIe switch on the
        -- lab: GPUs 0 and 1), where Slurm would take g on each socket (GPUs 0 and 4)
        NOTES[#NOTES + 1] = "--gpus-per-socket=" .. g .. " counts as " .. per_node .. " GPUs on one node, placed as close together as its cells allow, not spread over its sockets"
      end
    end
  end
  return nodes, per_node, total, shards
end

-- the site's figures for the request's GPU type, or for the largest type when it names none
local function type_of(req)
  return req.gpu_type and site().gpu_types[string.lower(req.gpu_type)] or site().largest
end

local function check_size(req)
  local t = type_of(req)
  if req.gpus_per_node ~= nil and req.gpus_per_node > t.max_per_node then
    fail(req.gpus_per_node .. " GPUs per node asked, but a node has at most " .. t.max_per_node)
  end
  if req.nodes ~= nil and req.nodes > t.nodes then
    fail(req.nodes .. " nodes with GPUs asked, but the cluster has " .. t.nodes)
  end
  if req.gpus ~= nil and req.gpus < 1 then
    fail("a GPU job needs at least one GPU")
  end
  local vc = site().vcs[req.vc]
  if vc == nil then
    fail("account '" .. req.vc .. "' is not a virtual cluster of hivebatch (VCs: " .. site().vc_list .. ")")
  end
  local limit = req.qos == SITE.opportunistic and t.total or vc.gpus
  if req.gpus ~= nil and req.gpus > limit then
    fail(req.gpus .. " GPUs asked, but " .. (req.qos == SITE.opportunistic and "the cluster" or "virtual cluster " .. req.vc) .. " has " .. limit)
  end
  if req.gpu_mem_mib ~= nil and req.gpu_mem_mib > t.mem_mib then
    fail(req.gpu_mem_mib / SITE.shard_mib .. " GiB of GPU memory asked, but one GPU has " .. t.mem_mib / SITE.shard_mib)
  end
end

-- "node[1-3,05],gpu7" -> { node1, node2, node3, node05, gpu7 }: slurmctld gives the plugin node lists
-- only as Slurm writes them, and Lua no expander (one bracket per name, as slurm.conf node names use)
function M.expand_hostlist(text)
  local items, depth, start = {}, 0, 1
  text = text or ""
  for i = 1, #text do
    local c = text:sub(i, i)
    if c == "[" then
      depth = depth + 1
    elseif c == "]" then
      depth = depth - 1
    elseif c == "," and depth == 0 then
      items[#items + 1] = text:sub(start, i - 1)
      start = i + 1
    end
  end
  items[#items + 1] = text:sub(start)
  local out = {}
  for _, item in ipairs(items) do
    local head, ranges, tail = item:match("^([^%[]*)%[([^%]]*)%](.*)$")
    if head == nil then
      if item ~= "" then
        out[#out + 1] = item
      end
    else
      for part in string.gmatch(ranges, "[^,]+") do
        local lo, hi = part:match("^(%d+)%-(%d+)$")
        lo, hi = lo or part, hi or part
        for i = tonumber(lo), tonumber(hi) do
          out[#out + 1] = head .. string.format("%0" .. #lo .. "d", i) .. tail
        end
      end
    end
  end
  return out
end

-- the partitions a job may run in (those it names, else the default one) that hold GPU nodes
local function gpu_partitions(job_desc, part_list, current_partition)
  local asked, out = {}, {}
  for name in string.gmatch(get(job_desc, "partition") or current_partition or "", "[^,]+") do
    asked[name] = true
  end
  for name, part in pairs(part_list or {}) do
    local pname = part.name or name
    local default = (part.flag_default or 0) ~= 0
    if (next(asked) ~= nil and asked[pname]) or (next(asked) == nil and default) then
      for _, node in ipairs(M.expand_hostlist(part.nodes)) do
        if (site().gpu_nodes or {})[node] ~= nil then
          -- MaxCPUsPerNode and MaxNodes are INFINITE when unlimited
          local cap, most = tonumber(part.max_cpus_per_node), tonumber(part.max_nodes)
          out[#out + 1] = {
            name = pname, whole = part.max_share == 0, total_cpus = part.total_cpus, nodes = part.nodes,
            max_cpus = (is_set(cap) and cap > 0) and cap or nil,
            max_mem = tonumber(part.max_mem_per_node), -- MaxMemPerNode; nil when unset or per CPU
            min_nodes = math.max(tonumber(part.min_nodes) or 1, 1),
            max_nodes = (is_set(most) and most > 0) and most or nil,
          }
          break
        end
      end
    end
  end
  return out
end

-- Slurm gives an --exclusive job every GPU of its nodes, asked for or not (recorded on the lab: a CPU
-- job got CUDA_VISIBLE_DEVICES=0..7): such a job reaching GPU nodes is a whole-node GPU job
local function reaches_gpu_nodes(job_desc, part_list, current_partition)
  return #gpu_partitions(job_desc, part_list, current_partition) > 0
end
M.reaches_gpu_nodes = reaches_gpu_nodes

-- A partition with OverSubscribe=EXCLUSIVE (max_share 0) gives every job in it whole nodes, as
-- --exclusive does (recorded: tests/fixtures/slurm/partition_exclusive_gpus.txt); the name of the
-- first such GPU partition the job may run in, else nil
local function whole_node_partition(job_desc, part_list, current_partition)
  for _, part in ipairs(gpu_partitions(job_desc, part_list, current_partition)) do
    if part.whole then
      return part.name
    end
  end
  return nil
end

-- The largest figure in the request's VC's per-type table (``whole_nodes`` or ``node_gpus``) over the
-- GPU types the request can use; nil for opportunistic work, which runs on any idle GPUs
local function vc_most(req, field)
  local vc = site().vcs[req.vc]
  if vc == nil or vc[field] == nil or req.qos == SITE.opportunistic then
    return nil
  end
  local t = req.gpu_type and site().gpu_types[string.lower(req.gpu_type)] or nil
  local most = 0
  for name, n in pairs(vc[field]) do
    if (t == nil or site().gpu_types[name] == t) and n > most then
      most = n
    end
  end
  return most
end

-- How many nodes a job of the request can span: a job on several nodes runs only in its VC's cells
-- of a node or more (the cells below lie on one node each)
local function node_room(req)
  local whole = vc_most(req, "whole_nodes")
  if whole == nil then
    return type_of(req).nodes
  end
  return math.max(whole, 1)
end

-- A job's GPUs are pinned by per-node GRES, so every node of a job gets the same GPUs. A total that
-- no such placement within reach holds exactly (Slurm splits 3 GPUs over -N 2 as 2 + 1, and
-- --gpus=11 as 7 + 4: tests/fixtures/slurm/uneven_gpus_over_nodes.txt) runs on the smallest one
-- that holds it, fewest nodes on a tie, and its owner is told; a total that some node count splits
-- evenly keeps its shape open for the controller.
--
-- GPUs asked per task go to nodes with whole tasks: Slurm spreads -n 5 over two nodes as 3 + 2 tasks,
-- so --gpus-per-task=2 needs 6 GPUs on each (plain Slurm gave 8 + 2; as 5 + 5 the job's srun failed:
-- tests/fixtures/slurm/gpus_per_task_over_nodes.txt).
local function round_up(req, total, nodes)
  local per_node = type_of(req).max_per_node
  local lo = nodes or math.max(1, math.ceil(total / per_node))
  local best_n, best_per = nil, nil
  for n = lo, nodes or math.max(lo, node_room(req)) do
    local per = TASKS and req.gpus_per_task * math.ceil(TASKS / n) or math.ceil(total / n)
    if per <= per_node and (best_n == nil or n * per < best_n * best_per) then
      best_n, best_per = n, per
    end
  end
  if best_n == nil or (nodes == nil and best_n * best_per == total and not TASKS) then
    return -- an exact split exists, or nothing holds it: check_size and check_nodes say why
  end
  req.nodes, req.gpus_per_node, req.gpus = best_n, best_per, best_n * best_per
  if req.gpus == total then
    return
  end
  ROUNDED = req.gpus
  local per_task = TASKS and (" (" .. TASKS .. " tasks with " .. req.gpus_per_task .. " each)") or ""
  local how = total .. " GPUs" .. per_task .. " run as " .. best_per .. " on each of " .. best_n .. " nodes"
  local vc = site().vcs[req.vc]
  if vc ~= nil and req.qos ~= SITE.opportunistic and req.gpus > vc.gpus then
    fail(how .. " here (a job gets the same GPUs on every node), " .. req.gpus .. " in all, but virtual cluster " .. req.vc .. " has " .. vc.gpus .. ": ask for a count that " .. (nodes and "-N splits evenly" or "fits on equal nodes"))
  end
  local counted = req.qos == SITE.opportunistic and "" or (", counted against " .. req.vc)
  NOTES[#NOTES + 1] = how .. " (" .. req.gpus .. " in all" .. counted .. "): a job gets the same GPUs on every node here"
end

-- how many nodes the job runs on: as asked, else the fewest that hold its GPUs
local function nodes_needed(req)
  return req.nodes or math.ceil((req.gpus or 1) / type_of(req).max_per_node)
end

-- Refused here, a job its VC's cells can never hold would wait held for ever while sbatch or srun
-- says nothing: more GPUs on one node than its largest cell, or more nodes than its whole-node cells
local function check_nodes(req, tasks)
  if req.gpus == nil then
    return
  end
  local per = type_of(req).max_per_node
  local need = nodes_needed(req)
  local on_one = math.min(vc_most(req, "node_gpus") or per, per)
  local also = ", or submit it with --qos=" .. SITE.opportunistic .. " to run on idle GPUs"
  local asked = req.gpus_per_node or req.gpus
  if need == 1 and asked > on_one then
    fail("virtual cluster " .. req.vc .. "'s cells hold at most " .. on_one .. " GPUs on one node, and the job asks for " .. asked .. " there: ask for at most " .. on_one .. also)
  end
  local whole = vc_most(req, "whole_nodes")
  if need > 1 and whole ~= nil and need > math.max(whole, 1) then
    local fix, tasks_fit = "use at most " .. whole .. " nodes", " and tasks " .. whole .. " nodes hold"
    if whole <= 1 then
      fix, tasks_fit = "ask for at most " .. on_one .. " GPUs on one node", " and tasks one node holds"
    end
    if is_set(tasks) and tasks > 1 then
      -- srun's cli_filter sets -N to the nodes its tasks need (srun -n 32 --gres=gpu:2), so the tasks
      -- may be what needs them
      fix = fix .. tasks_fit .. " (-n, -c, --ntasks-per-node)"
    end
    fail("a job on " .. need .. " nodes needs as many whole-node cells, and virtual cluster " .. req.vc .. " has " .. whole .. ": " .. fix .. also)
  end
end

-- the hivebatch request for a GPU ask, with the job's account and QOS (or their defaults); an
-- --exclusive job's is every GPU of its nodes
function M.request(job_desc, found, exclusive)
  local req = {}
  req.vc = get(job_desc, "account") or get(job_desc, "default_account")
  if req.vc == nil or req.vc == "" then
    fail("no account: give -A ACCOUNT or ask your admin for a default account")
  end
  req.qos = get(job_desc, "qos") or get(job_desc, "default_qos") or SITE.default_class
  if SITE.classes[req.qos] == nil then
    fail("QOS '" .. req.qos .. "' is not a hivebatch class (classes: " .. SITE.class_list .. ")")
  end
  local nodes, per_node, total, shards = shape(job_desc, found, req)
  if exclusive then
    -- whole nodes, as Slurm allocates them: every GPU of each, counted against the VC
    local t = type_of(req)
    nodes = nodes or 1
    per_node, total, shards = t.max_per_node, nil, nil
    req.exclusive = 1
    local vc = site().vcs[req.vc]
    if vc ~= nil and req.qos ~= SITE.opportunistic and per_node * nodes > vc.gpus then
      local fix = string.sub(exclusive, 1, 2) == "--" and "drop " .. exclusive .. " and ask for the GPUs the job needs"
        or "submit it to a partition that shares its nodes"
      fail(exclusive .. " takes whole nodes with all their " .. per_node * nodes .. " GPUs, but virtual cluster " .. req.vc .. " has " .. vc.gpus .. ": " .. fix)
    end
  end
  if shards ~= nil then
    if (per_node or 0) > 0 or (total or 0) > 0 then
      fail("ask for whole GPUs or for a GPU memory slice (shard), not both")
    end
    if nodes ~= nil and nodes > 1 then
      fail("a GPU memory slice (shard) runs on one node: drop -N or ask for whole GPUs")
    end
    req.gpu_mem_mib = shards * SITE.shard_mib
    req.gpus = 1
    req.nodes = 1
    req.gpus_per_node = 1
  elseif per_node ~= nil then
    req.nodes = nodes or 1
    req.gpus_per_node = per_node
    req.gpus = per_node * req.nodes
  else
    req.gpus = total
    local whole_tasks = TASKS and (total > type_of(req).max_per_node or (nodes or 1) > 1)
    if nodes ~= nil and total % nodes == 0 and not whole_tasks then
      req.nodes = nodes
      req.gpus_per_node = total / nodes
    elseif total ~= nil and (nodes ~= nil or total > type_of(req).max_per_node) then
      round_up(req, total, nodes)
    end
  end
  local tl = get(job_desc, "time_limit")
  -- Slurm takes any limit (sbatch wraps -t 99999999999999 into 32 bits); one past the bound says no
  -- more of the job's length than -t infinite does, and is planned as such, while Slurm keeps it
  if is_set(tl) and tl <= site().max_time_min then
    req.time_limit_s = tl * 60
  end
  check_size(req)
  check_nodes(req, get(job_desc, "num_tasks"))
  return req
end

local function is_operator(uid)
  return SITE.operator_uids[uid] == true
end

-- Slurm's per-GPU options refer to the GPUs this plugin takes off; turn them into plain per-node figures
local function translate_per_gpu(job_desc, req)
  for _, f in ipairs({ "cpus_per_tres", "mem_per_tres" }) do
    local items, rest = split_gpu(get(job_desc, f))
    if #items > 0 then
      local each = items[1].count
      local per_node = req.gpus_per_node or req.gpus
      if f == "cpus_per_tres" then
        req.cpus_per_gpu = each
        job_desc.pn_min_cpus = each * per_node
      else
        req.mem_per_gpu_mb = each
        job_desc.min_mem_per_node = each * per_node
      end
      job_desc[f] = rest
    end
  end
  local ntasks_per_gpu = get(job_desc, "ntasks_per_tres")
  if is_set(ntasks_per_gpu) then
    req.ntasks_per_gpu = ntasks_per_gpu
    if not is_set(get(job_desc, "num_tasks")) then
      job_desc.num_tasks = ntasks_per_gpu * req.gpus
    end
    job_desc.ntasks_per_tres = NO_VAL16
  end
  for _, f in ipairs({ "tres_bind", "tres_freq" }) do
    local v = get(job_desc, f)
    if v ~= nil and v ~= "" then
      req[f] = v
      job_desc[f] = ""
    end
  end
end

-- sbatch copies --gpus=3 into the job's environment as SLURM_GPUS=3 (--gpus-per-node=2 as
-- SLURM_GPUS_PER_NODE=2); scripts read them, and the job's own srun reads them back as its step's ask.
-- Where the job holds more than asked they are written back as what it holds, so its steps take all
-- the GPUs it is charged for: a --gpus total round_up raised (-N 2 --gpus=3 runs as 2 + 2), and the
-- GPUs per node of a whole-node job (tests/fixtures/slurm/step_gpu_env.txt). srun and salloc keep
-- their environment on the client.
local function set_count(env, name, count)
  local has, value = pcall(function()
    return env[name]
  end)
  local prefix = has and type(value) == "string" and string.match(value, "^(.-)%d+$")
  if prefix and count ~= nil then
    env[name] = prefix .. count
  end
end

local function sync_gpus_env(job_desc, req)
  local ok, env = pcall(function()
    return job_desc.environment
  end)
  if not ok or env == nil then
    return
  end
  set_count(env, "SLURM_GPUS", ROUNDED)
  if req.exclusive then
    set_count(env, "SLURM_GPUS_PER_NODE", req.gpus_per_node)
  end
end

-- Per-user limits on the strict classes (hivebatch/userlimits.py, docs/enforcement.md) -------------
-- The limits come with the site table; the use comes from the usage file the controller rewrites each
-- cycle (only it and root can write there). Without a fresh, readable file the limits are not
-- checked here (fail open, logged): refusing every urgent job while the controller is down would stop
-- the work that most needs to run, and the controller checks the same limits again before it places
-- a job, running one over its limit in the next class down.

local LOWER = { urgent = "prior or normal", prior = "normal" }

local function field(t, k)
  if type(t) == "table" then
    return t[k]
  end
  return nil
end

-- a table the controller writes each cycle (``what``: "usage" or "node sizes", whose table is under
-- ``key``), or nil and why not; the chunk runs in an empty environment, so the file can hand back
-- data and do nothing else
local function load_controller_table(path, now, what, key)
  local chunk, err = loadfile(path)
  if chunk == nil then
    return nil, "cannot read the " .. what .. " file: " .. tostring(err)
  end
  setfenv(chunk, {})
  local ok, data = pcall(chunk)
  if not ok or type(field(data, key)) ~= "table" or type(field(data, "written_at")) ~= "number" then
    return nil, "the " .. what .. " file " .. path .. " holds no " .. what .. " table"
  end
  local age = now - data.written_at
  if age > SITE.usage_max_age_s then
    return nil, "the " .. what .. " file " .. path .. " is " .. age .. " s old (the controller rewrites it each cycle)"
  end
  return data
end

-- the controller's usage table, or nil and why not
function M.load_usage(now)
  return load_controller_table(SITE.usage_file, now, "usage", "users")
end

-- the controller's node sizes: the most CPUs, memory and temporary disk (MB) a node with GPUs has, per GPU type and
-- over all ("any"), and each GPU node's own (``nodes``); nil and why not
function M.load_node_sizes(now)
  return load_controller_table(SITE.nodes_file, now, "node sizes", "sizes")
end

local function node_sizes_now()
  if NODES_READ == nil then
    local data, why = M.load_node_sizes(os.time())
    NODES_READ = { data = data, why = why }
  end
  return NODES_READ.data, NODES_READ.why
end

-- the keys of SITE the controller's copy replaces, with the type each must have there
local FOLLOWED = {
  gpu_types = "table", type_list = "string", largest = "table", gpu_nodes = "table",
  vcs = "table", vc_list = "string", user_limits = "table", max_time_min = "number",
}

-- the config's part of the site table as the controller's node sizes file carries it when that file is
-- fresh and the part whole, else SITE
function M.current_site()
  if SITE.nodes_file == nil then
    return SITE
  end
  local copy = field(node_sizes_now(), "site")
  for key, kind in pairs(FOLLOWED) do
    if type(field(copy, key)) ~= kind then
      return SITE
    end
  end
  return copy
end

-- the controller's copy while its node sizes file is fresh, else what was written into this file, so
-- that an admin's change of the config counts from the controller's next cycle
site = function()
  if CURRENT == nil then
    CURRENT = M.current_site()
  end
  return CURRENT
end

-- the node figures the size test reads; 0 is "not reported" for all but the temporary disk, where 0 MB is
-- a figure (Slurm refuses any --tmp there)
local SIZE_FIGURES = { "cpus", "mem_mb", "sockets", "cores", "threads", "tmp_mb" }

-- the most of each figure one node of the job's GPU type has in the partitions it may run in
-- (slurmctld's part_list names their nodes), a figure nil where some node's is not known; nil when
-- the file does not list those nodes. A partition's MaxCPUsPerNode bounds the CPUs its jobs get of a
-- node (tests/fixtures/slurm/partition_max_cpus.txt): ``capped_by`` names it when it bounds the most.
local function largest_in_partitions(data, req, parts)
  local nodes, key = field(data, "nodes"), req.gpu_type and string.lower(req.gpu_type)
  if type(nodes) ~= "table" then
    return nil
  end
  local most, seen = { job_mem_mb = 0 }, false
  for _, f in ipairs(SIZE_FIGURES) do
    most[f] = 0
  end
  for _, part in ipairs(parts) do
    for _, name in ipairs(M.expand_hostlist(part.nodes)) do
      local n = field(nodes, name)
      if type(n) == "table" and (key == nil or n.type == key) then
        seen = true
        for _, f in ipairs(SIZE_FIGURES) do
          local v = tonumber(n[f])
          local known = v ~= nil and (v > 0 or f == "tmp_mb")
          local capped = known and f == "cpus" and part.max_cpus ~= nil and part.max_cpus < v
          v = capped and part.max_cpus or v
          if most[f] ~= nil and known and v > most[f] then
            most[f] = v
            if f == "cpus" then
              most.capped_by = capped and part.name or nil
            end
          elseif not known then
            most[f] = nil
          end
        end
        -- the memory a job may use there, which Slurm spreads tasks by (partition_max_mem.txt)
        local mem = tonumber(n.mem_mb)
        if most.job_mem_mb ~= nil and mem ~= nil and mem > 0 then
          most.job_mem_mb = math.max(most.job_mem_mb, math.min(mem, part.max_mem or mem))
        else
          most.job_mem_mb = nil
        end
      end
    end
  end
  return seen and most or nil
end

-- -B's parts (--sockets-per-node, --cores-per-socket, --threads-per-core): Slurm starts a job only on a
-- node with at least as many (node_scheduler.c _build_node_list)
local LAYOUT = {
  { "sockets_per_node", "sockets", "sockets", "--sockets-per-node or -B" },
  { "cores_per_socket", "cores", "cores per socket", "--cores-per-socket or -B" },
  { "threads_per_core", "threads", "threads per core", "--threads-per-core, -B or --hint" },
}

-- the fewest GPUs the job has on a node: its per-node count, all of them when it may use one node only,
-- else one (Slurm spreads --gpus=2 --cpus-per-gpu=12 over two 16-CPU nodes:
-- tests/fixtures/slurm/tasks_spread_over_nodes.txt)
local function least_gpus_per_node(job_desc, req)
  if req.gpus_per_node ~= nil then
    return req.gpus_per_node
  end
  if get(job_desc, "max_nodes") == 1 and req.gpus ~= nil then
    return req.gpus
  end
  return 1
end

-- --cpus-per-gpu's or --mem-per-gpu's figure (cpus_per_tres, mem_per_tres), or nil
local function per_gpu(job_desc, name)
  local items = split_gpu(get(job_desc, name))
  return #items > 0 and items[1].count or nil
end

-- the CPUs one node must have for the job, from the fields sbatch, srun and salloc fill: a task's CPUs,
-- --mincpus, the tasks on one node, and all the job's CPUs when it may use one node only (min_cpus is 1
-- with --overcommit, which Slurm then accepts)
function M.cpus_per_node(job_desc)
  local cpt = get(job_desc, "cpus_per_task")
  cpt = is_set(cpt) and cpt or 1
  local need = cpt
  local pn, tpn = get(job_desc, "pn_min_cpus"), get(job_desc, "ntasks_per_node")
  if is_set(pn) and pn > need then
    need = pn
  end
  if is_set(tpn) and tpn * cpt > need then
    need = tpn * cpt
  end
  local min_cpus = get(job_desc, "min_cpus")
  if get(job_desc, "max_nodes") == 1 and is_set(min_cpus) and min_cpus > need then
    need = min_cpus
  end
  return need
end

-- the memory (MB) one node must have for the job: --mem (0: whatever the node has) or --mem-per-cpu
-- times its CPUs there; 0 when it names none
function M.mem_per_node(job_desc, cpus)
  local per_node, per_cpu = get(job_desc, "min_mem_per_node"), get(job_desc, "min_mem_per_cpu")
  if type(per_node) == "number" then
    return per_node
  end
  if type(per_cpu) == "number" then
    return per_cpu * cpus
  end
  return 0
end

-- Slurm accepts a job asking more CPUs in all than its partitions have (-c 500 on the lab's 64): it
-- waits for ever, reason PartitionConfig, under the default EnforcePartLimits=NO
-- (tests/fixtures/slurm/held_impossible_accepted.txt); so the plugin does too
function M.beyond_partitions(job_desc, parts)
  local min_cpus, most = get(job_desc, "min_cpus"), 0
  for _, part in ipairs(parts) do
    most = math.max(most, tonumber(part.total_cpus) or 0)
  end
  return is_set(min_cpus) and most > 0 and min_cpus > most
end

-- Slurm refuses at submit a job no node could ever hold ("Requested node configuration is not
-- available"), but it does not test a held job, and this plugin holds every GPU job
-- (tests/fixtures/slurm/held_job_sizes.txt): so the test is made here, against the largest node with
-- the job's GPUs. A job its owner holds (-H) is accepted, as Slurm accepts it; without a fresh sizes
-- file nothing is refused (the controller still says why such a job never runs).
--
-- Returns what a job of its partitions gets of the largest node of its GPU type there (else in the
-- whole cluster; nil: not known here), by which the controller spreads a job's tasks.
local function check_node_sizes(job_desc, req, parts)
  if req.user_hold or SITE.nodes_file == nil then
    return nil
  end
  local data, why = node_sizes_now()
  if data == nil then
    slurm.log_info("hivebatch: %s; node sizes are not checked at submit", why)
    return nil
  end
  local largest = field(data.sizes, req.gpu_type and string.lower(req.gpu_type) or "any")
  if type(largest) ~= "table" then
    return nil
  end
  local where = "the largest node with " .. (req.gpu_type and (req.gpu_type .. " ") or "") .. "GPUs"
  local within = largest_in_partitions(data, req, parts)
  if within ~= nil then
    local partitions = get(job_desc, "partition")
    for _, f in ipairs(SIZE_FIGURES) do
      if (within[f] or 0) < (tonumber(field(largest, f)) or 0) then
        -- its partitions hold only smaller nodes than the cluster has: name them, so the owner may move
        where = where .. " in partition " .. tostring(partitions or "its default partition")
        break
      end
    end
    largest = within
  end
  local gpus = least_gpus_per_node(job_desc, req)
  local cpus = math.max(M.cpus_per_node(job_desc), (per_gpu(job_desc, "cpus_per_tres") or 0) * gpus)
  local have_cpus = tonumber(field(largest, "cpus"))
  if have_cpus ~= nil and cpus > have_cpus and not M.beyond_partitions(job_desc, parts) then
    local has = where .. " has " .. have_cpus
    if largest.capped_by ~= nil then
      has = "partition " .. largest.capped_by .. " lets a job use " .. have_cpus .. " CPUs of a node (MaxCPUsPerNode)"
    end
    fail("the job needs " .. whole(cpus) .. " CPUs on one node, but " .. has .. ": ask for fewer CPUs per node (-c, --cpus-per-gpu, --ntasks-per-node, --mincpus) or spread the tasks over more nodes (-N)")
  end
  local mem = math.max(M.mem_per_node(job_desc, cpus), (per_gpu(job_desc, "mem_per_tres") or 0) * gpus)
  local have_mem = tonumber(field(largest, "mem_mb"))
  if have_mem ~= nil and mem > have_mem then
    fail("the job needs " .. whole(mem) .. " MB of memory on one node, but " .. where .. " has " .. have_mem .. " MB: ask for less (--mem, --mem-per-gpu, --mem-per-cpu)")
  end
  local tmp, have_tmp = get(job_desc, "pn_min_tmp_disk"), tonumber(field(largest, "tmp_mb"))
  if is_set(tmp) and have_tmp ~= nil and tmp > have_tmp then
    fail("the job needs " .. whole(tmp) .. " MB of temporary disk on one node (--tmp), but " .. where .. " has " .. have_tmp .. " MB: ask for less, or leave --tmp out")
  end
  for _, l in ipairs(LAYOUT) do
    local asked, have = get(job_desc, l[1]), tonumber(field(largest, l[2]))
    if is_set(asked) and have ~= nil and asked > have then
      fail("the job needs " .. asked .. " " .. l[3] .. " on one node, but " .. where .. " has " .. have .. ": ask for no more (" .. l[4] .. ")")
    end
  end
  -- a socket's CPUs bound its tasks (cons_common.c can_job_run_on_node)
  local per_socket = (tonumber(field(largest, "cores")) or 0) * (tonumber(field(largest, "threads")) or 0)
  local tasks = get(job_desc, "ntasks_per_socket")
  if is_set(tasks) and per_socket > 0 and tasks > per_socket then
    fail("the job asks " .. tasks .. " tasks per socket, but " .. where .. " has " .. per_socket .. " CPUs on a socket: ask for fewer (--ntasks-per-socket)")
  end
  return largest
end

local FEWER_TASKS = "fewer tasks or CPUs (-n, -c, --ntasks-per-node)"

-- --overcommit (-O): Slurm allocates as if one task ran on each node, with a task's CPUs there, and
-- runs `-n 64 -O` on one node (tests/fixtures/slurm/overcommit.txt). 22.05 shows the plugin no
-- overcommit field, but sbatch, srun and salloc then set min_cpus to the node count instead of the
-- tasks' CPUs (slurm_opt_create_job_desc), which is never less than the tasks otherwise
function M.overcommitted(job_desc)
  local tasks, min_cpus = get(job_desc, "num_tasks"), get(job_desc, "min_cpus")
  return is_set(tasks) and is_set(min_cpus) and tasks > 1 and min_cpus < tasks
end

-- how many nodes Slurm spreads a job with no node count over (HIVEBATCH_SPREAD, written above this
-- file), on nodes of ``largest`` (nil: not known, so only --ntasks-per-node counts), why, and what
-- its owner can ask less of
function M.tasks_nodes(job_desc, largest)
  local tasks, per_task = get(job_desc, "num_tasks"), get(job_desc, "cpus_per_task")
  local per_cpu, on_node = get(job_desc, "min_mem_per_cpu"), get(job_desc, "ntasks_per_node")
  tasks, per_task = is_set(tasks) and tasks or 1, is_set(per_task) and per_task or 1
  if M.overcommitted(job_desc) then
    return 1, nil, nil
  end
  per_cpu = (type(per_cpu) == "number" and is_set(per_cpu)) and per_cpu or 0
  local cpus, mem = tonumber(field(largest, "cpus")) or 0, tonumber(field(largest, "mem_mb")) or 0
  local need, rule = HIVEBATCH_SPREAD.nodes(tasks, per_task, per_cpu, is_set(on_node) and on_node or 0, cpus, mem)
  if rule == "cpus" then
    return need, "its " .. tasks * per_task .. " CPUs need " .. need .. " nodes of at most " .. cpus .. " CPUs each", FEWER_TASKS
  elseif rule == "mem" then
    return need, "its " .. tasks .. " tasks of " .. per_task * per_cpu .. " MB memory (--mem-per-cpu) need " .. need .. " nodes of at most " .. mem .. " MB each",
      "fewer tasks or less memory per CPU (-n, --mem-per-cpu)"
  elseif rule == "tasks" then
    return need, "its " .. tasks .. " tasks, at most " .. on_node .. " on a node (--ntasks-per-node), need " .. need .. " nodes", FEWER_TASKS
  end
  return 1, nil, nil
end

-- the fewest nodes Slurm runs a job of ``parts`` on and the most (0: any), the loosest of them
-- (MinNodes, MaxNodes: tests/fixtures/slurm/partition_node_limits.txt), and the partitions that set them
local function partition_node_range(parts)
  local range, fewest_where, most_where = nil, {}, {}
  for _, part in ipairs(parts) do
    range = HIVEBATCH_SPREAD.looser(range, part.min_nodes, part.max_nodes or 0)
    if part.min_nodes > 1 then
      fewest_where[#fewest_where + 1] = part.name .. "'s MinNodes is " .. part.min_nodes
    end
    if part.max_nodes ~= nil then
      most_where[#most_where + 1] = part.name .. "'s MaxNodes is " .. part.max_nodes
    end
  end
  range = range or HIVEBATCH_SPREAD.looser(nil, 1, 0)
  return range.fewest, range.most, table.concat(fewest_where, ", "), table.concat(most_where, ", ")
end

-- Refused here, a job whose owner gave no node count and whose tasks need more nodes than its VC's
-- whole-node cells or its partitions allow would wait held for ever (sbatch) or hang (srun) where the
-- controller rejects it; plain Slurm spreads it over the nodes they need, at least its partitions'
-- MinNodes, and refuses it beyond their MaxNodes. A count or a range the owner gave is check_nodes'
-- and the controller's to judge.
local function check_spread(job_desc, req, largest, parts)
  local max_nodes = get(job_desc, "max_nodes")
  if (is_set(max_nodes) and max_nodes > 0) or req.gpu_mem_mib ~= nil then
    return
  end
  -- a partition's MaxMemPerNode bounds the memory of the tasks on a node, not the node's size
  local sized = largest and { cpus = largest.cpus, mem_mb = largest.job_mem_mb or largest.mem_mb }
  local need, why, fewer = M.tasks_nodes(job_desc, sized)
  local fewest, most, fewest_where, most_where = partition_node_range(parts)
  if most > 0 and need > most then
    fail(why .. ", and Slurm runs a job on at most " .. most .. " there (partition " .. most_where .. "): ask for " .. fewer)
  end
  if fewest > need then
    need, why, fewer = fewest, "partition " .. fewest_where, "another partition (-p)"
  end
  local whole = vc_most(req, "whole_nodes")
  if whole ~= nil and need > math.max(whole, 1) and need > (req.nodes or 1) then
    fail(why .. ", and a job on several nodes runs in whole-node cells, of which virtual cluster " .. req.vc .. " has " .. whole .. ": ask for " .. fewer .. ", or submit it with --qos=" .. SITE.opportunistic .. " to run on idle GPUs")
  end
end

local function hours(x)
  local text = string.format("%.1f", x)
  return (text:gsub("%.0$", ""))
end

-- nil while the user may add one more `cls` job in `vc`, else the one line saying why not; a job
-- record names its owner by uid only (22.05 leaves job_rec.user_name unset), which the file maps
function M.limit_problem(user, uid, vc, cls, now)
  local limit = field(field(site().user_limits, vc), cls)
  if limit == nil then
    return nil
  end
  local usage, why = M.load_usage(now)
  if usage == nil then
    slurm.log_error("hivebatch: %s; %s limits are checked at placement only", why, cls)
    return nil
  end
  user = user or field(usage.uids, uid)
  if user == nil then
    return nil -- not in the file: no use of the strict classes
  end
  local use = field(field(usage.users[user], vc), cls)
  local used, running = tonumber(field(use, "gpu_hours")) or 0, tonumber(field(use, "running")) or 0
  local over
  if limit.gpu_hours_per_week ~= nil and used >= limit.gpu_hours_per_week then
    over = user .. " used " .. hours(used) .. " of " .. hours(limit.gpu_hours_per_week) .. " GPU-hours in the last 7 days"
  elseif limit.running_jobs ~= nil and running >= limit.running_jobs then
    over = user .. " has " .. running .. " of " .. limit.running_jobs .. " " .. cls .. " jobs holding GPUs"
  else
    return nil
  end
  return cls .. " jobs in " .. vc .. ": " .. over .. "; submit as " .. LOWER[cls]
end

local function check_limits(user, uid, vc, cls)
  local problem = M.limit_problem(user, uid, vc, cls, os.time())
  if problem ~= nil then
    fail(problem)
  end
end

-- an owner moving a waiting job into a strict class (or a strict job to another VC) meets the same limits
-- An owner may move a waiting GPU job to another VC they belong to (scontrol update Account=), as Slurm
-- lets them: the controller follows the account. Not once its GPUs are chosen: the cells holding them
-- are the old VC's.
local function check_class_change(job_desc, job_rec)
  local qos, account = get(job_desc, "qos"), get(job_desc, "account")
  local cls = (qos ~= nil and qos ~= "") and qos or job_rec.qos
  local vc = (account ~= nil and account ~= "") and account or job_rec.account
  if vc ~= job_rec.account then
    if site().vcs[vc] == nil then
      fail("account '" .. vc .. "' is not a virtual cluster of hivebatch (VCs: " .. site().vc_list .. ")")
    end
    if #split_gpu(job_rec.tres_per_node) > 0 then
      fail("hivebatch job " .. tostring(job_rec.job_id) .. " has its GPUs in VC " .. tostring(job_rec.account) .. " already: cancel and resubmit it with -A " .. vc)
    end
  end
  if cls ~= job_rec.qos or vc ~= job_rec.account then
    check_limits(job_rec.user_name, job_rec.user_id, vc, cls)
  end
end

-- "[{R|B}:]SIG[@TIME]" (sbatch's --signal) -> { signal =, time =, batch = } or nil
function M.parse_signal(text)
  if type(text) ~= "string" then
    return nil
  end
  local flags, rest = text:match("^([RrBb]+):(.+)$")
  if flags == nil then
    flags, rest = "", text
  end
  local sig, time = rest:match("^(%w+)@(%d+)$")
  if sig == nil then
    sig = rest:match("^(%w+)$")
  end
  if sig == nil then
    return nil
  end
  return { signal = string.upper(sig), time = tonumber(time), batch = string.find(string.upper(flags), "B") ~= nil }
end

-- the last --signal among the script's directives, read as sbatch reads them: lines beginning with
-- #SBATCH, up to the first line that is neither blank nor a comment
function M.script_signal(script)
  if type(script) ~= "string" then
    return nil
  end
  local found = nil
  for line in string.gmatch(script, "([^\n]*)\n?") do
    if line:match("^%s*[^%s#]") then
      break
    end
    local args = line:match("^#SBATCH%s+(.*)$")
    for value in string.gmatch(args or "", "%-%-signal[=%s]+(%S+)") do
      found = value
    end
  end
  return found
end

-- the note srun's and sbatch's cli_filter puts in front of a new job's comment: the job's --signal
local SIGNAL_NOTE = "hivebatch:signal:"

-- a comment's --signal note and the comment as its user wrote it; nil and the comment without a note
function M.split_signal_note(comment)
  if type(comment) ~= "string" or string.sub(comment, 1, #SIGNAL_NOTE) ~= SIGNAL_NOTE then
    return nil, comment
  end
  local signal, own = string.match(string.sub(comment, #SIGNAL_NOTE + 1), "^(%S+)%s?(.*)$")
  return signal, own or ""
end

-- Slurm 22.05 gives this plugin no warn_signal/warn_time/warn_flags (job_submit_lua.c), so the job's
-- --signal is read from what its submission shows: the cli_filter's note (``told``: the options as
-- Slurm merged them, command line included), else SBATCH_SIGNAL in its environment (sbatch lets it
-- override the script), else the script's directives. It only chooses the signal the job's own
-- preemption notice uses; the notice's length is the admin's.
local function record_signal(job_desc, req, told)
  local given = told
  local ok, env = pcall(function()
    return job_desc.environment
  end)
  if given == nil and ok and env ~= nil then
    local has, value = pcall(function()
      return env["SBATCH_SIGNAL"]
    end)
    if has and value ~= nil and value ~= "" then
      given = value
    end
  end
  local spec = M.parse_signal(given or M.script_signal(get(job_desc, "script")))
  if spec == nil then
    return
  end
  req.signal = spec.signal
  req.signal_time_s = spec.time
  if spec.batch then
    req.signal_batch = 1
  end
end

-- srun (no script, a command) starts its first step with its own GPU options, and slurmctld checks them
-- against the job's per-index GRES record by record: a per-node count over 1 meets a one-GPU record and
-- a GPU type meets none, so the step is refused after the wait for placement (recorded:
-- tests/fixtures/slurm/srun_step_gres.txt). --gpus=N and salloc's inner plain srun start; cli_filter.lua
-- rewrites such an ask on one node, and this refuses what it leaves (or a client without the filter).
local function check_srun_step(job_desc, found)
  if get(job_desc, "script") ~= nil or (get(job_desc, "argc") or 0) < 1 then
    return
  end
  for f, items in pairs(found) do
    for _, item in ipairs(items) do
      local what = nil
      if item.name == "gpu" and item.type ~= nil then
        what = "a GPU type (" .. item.type .. ")"
      elseif item.name == "gpu" and f == "tres_per_node" and item.count > 1 then
        what = "a per-node GPU count (" .. item.count .. " per node)"
      end
      if what ~= nil then
        fail("srun cannot start its own step with " .. what .. " on hivebatch's per-GPU pins: ask srun for the job's GPUs as --gpus=N, or get them with salloc and run a plain srun inside")
      end
    end
  end
end

-- job_desc.shared values that keep other users' jobs off a job's nodes: on a GPU node that takes
-- GPUs from every other VC, so such a job holds whole nodes. Slurm kept a --exclusive=user job
-- pending beside another user's job on the GPUs it was pinned to, while --exclusive=mcs under
-- MCSPlugin=mcs/none shared the node (tests/fixtures/slurm/exclusive_user.txt)
local EXCLUSIVE = { [0] = "--exclusive", [2] = "--exclusive=user" }

local function submit(job_desc, part_list, submit_uid)
  NOTES = {}
  ROUNDED = nil
  TASKS = nil
  -- every job's comment goes back to what its user wrote, whatever this plugin does with the job
  local told, own = M.split_signal_note(get(job_desc, "comment"))
  if told ~= nil then
    job_desc.comment = own
  end
  if is_operator(submit_uid) then
    return slurm.SUCCESS
  end
  local found, rest = gpu_fields(job_desc)
  local exclusive = nil -- what makes the job take whole nodes, as the refusal names it
  local whole = whole_node_partition(job_desc, part_list)
  if whole ~= nil then
    exclusive = "partition " .. whole .. " (OverSubscribe=EXCLUSIVE)"
  elseif EXCLUSIVE[get(job_desc, "shared")] and reaches_gpu_nodes(job_desc, part_list) then
    exclusive = EXCLUSIVE[get(job_desc, "shared")]
    if exclusive ~= "--exclusive" then
      NOTES[#NOTES + 1] = exclusive .. " keeps other users' jobs off the job's nodes, so here it takes them whole, with all their GPUs"
    end
  end
  if next(found) == nil and not exclusive then
    return slurm.SUCCESS
  end
  if is_set(get(job_desc, "het_job_offset")) then
    -- scontrol 22.05 addresses a heterogeneous job's first component only as the whole job, whose
    -- nodes and GRES it refuses to change (recorded on the lab): the GPUs could never be pinned
    fail("a heterogeneous job cannot ask for GPUs here (hivebatch cannot pin one component's GPUs): submit the components as separate jobs, chained with --dependency if they must follow each other")
  end
  if (get(job_desc, "reservation") or "") ~= "" then
    -- an admin's reservation: its nodes take no work from the cells while it is active (the controller
    -- counts RESERVED nodes as bad), and Slurm itself places the reservation's jobs on them
    slurm.log_info("hivebatch: %s's GPU job runs in reservation %s, outside the cells", tostring(get(job_desc, "user_name")), tostring(get(job_desc, "reservation")))
    return slurm.SUCCESS
  end
  local req = M.request(job_desc, found, exclusive)
  check_srun_step(job_desc, found)
  check_limits(get(job_desc, "user_name"), get(job_desc, "user_id"), req.vc, req.qos)
  if get(job_desc, "priority") == 0 then
    req.user_hold = 1
  end
  -- the owner's --begin: while the job waits the plugin moves Slurm's begin time (a release parks it
  -- far away, the controller clears that), so the request keeps it for the controller (seen on the
  -- lab: released, the job was placed at once, where plain Slurm kept it pending for its BeginTime)
  local begin = get(job_desc, "begin_time")
  if is_set(begin) and begin >= RELEASED_BEGIN then
    -- the plugin's own holds are begin times from 2100-01-01 on: such a --begin would read as one of
    -- them, and the controller would not keep the job waiting for it
    fail("a --begin on or after 2100-01-01 cannot be told from hivebatch's own holds: submit it with --hold (scontrol release starts it), or with an earlier --begin")
  end
  if is_set(begin) and begin > 0 then
    req.begin = begin
  end
  -- the GPU partitions it may run in, read once from slurmctld's list (each expands a hostlist)
  local parts = gpu_partitions(job_desc, part_list)
  check_spread(job_desc, req, check_node_sizes(job_desc, req, parts), parts)
  translate_per_gpu(job_desc, req)
  record_signal(job_desc, req, told)
  if get(job_desc, "script") == nil and req.user_hold == nil then
    -- srun and salloc say only "Job is in held state, pending scheduler release"
    NOTES[#NOTES + 1] = "the job waits until hivebatch places it on GPUs of virtual cluster " .. req.vc .. "; 'hq --me' in another shell says why it waits"
  end
  if req.qos == SITE.opportunistic and get(job_desc, "requeue") == 0 then
    -- as under plain Slurm's PreemptMode=REQUEUE, a job that may not be requeued ends when preempted
    NOTES[#NOTES + 1] = "an " .. SITE.opportunistic .. " job makes way when its GPUs' owners need them; with --no-requeue it then ends instead of waiting to run again"
  end
  -- the owner's -w/--nodelist: the controller's pin replaces the job's node list, so the request keeps it
  local wanted = get(job_desc, "req_nodes")
  if type(wanted) == "string" and wanted ~= "" then
    req.nodelist = wanted
    -- Slurm adds nodes of its choice to a list shorter than the job; the cells choose no node outside
    -- the owner's list, so such a job would wait for ever
    local listed = #M.expand_hostlist(wanted)
    local need = nodes_needed(req)
    if need > listed then
      fail("-w/--nodelist names " .. listed .. " node(s) but the job runs on " .. need .. ": a GPU job here runs only on nodes it lists; list " .. need .. " nodes, or drop -w")
    end
  end
  local admin_comment = M.encode(req)
  for f, kept in pairs(rest) do
    job_desc[f] = kept
  end
  sync_gpus_env(job_desc, req)
  job_desc.admin_comment = admin_comment
  job_desc.priority = 0
  slurm.log_info("hivebatch: %s's GPU job held for placement: %s", tostring(get(job_desc, "user_name")), admin_comment)
  for _, note in ipairs(NOTES) do
    slurm.log_user("hivebatch: note: %s", note) -- sbatch, srun and salloc print it on acceptance
  end
  return slurm.SUCCESS
end

-- The controller reads a waiting job's node list and excluded nodes from Slurm when it places it,
-- so they stay the owner's to change until then (plain Slurm lets them:
-- tests/fixtures/slurm/owner_exclude_nodes.txt); a pinned job's node list is its pin, and its
-- exclusion could exclude the pin. A started job's exclusion Slurm refuses itself, in its own words
-- ("Job is no longer pending execution", for the running tasks of an array updated whole); a
-- started job's node list is how Slurm shrinks it, so that stays refused here.
local OWNERS_WHILE_WAITING = { req_nodes = true, exc_nodes = true }
local SLURMS_ONCE_STARTED = { exc_nodes = true }

local GUARDED = {
  tres_per_job = "the GPU ask",
  tres_per_node = "the GPU ask",
  tres_per_task = "the GPU ask",
  tres_per_socket = "the GPU ask",
  cpus_per_tres = "CPUs per GPU",
  mem_per_tres = "memory per GPU",
  req_nodes = "the node list",
  exc_nodes = "the excluded nodes",
  min_nodes = "the node count",
  max_nodes = "the node count",
  reservation = "the reservation",
  shared = "whether it shares its nodes (--exclusive)",
}

-- a job moved into a partition that gives every job whole nodes would take all their GPUs; one that
-- was a whole-node GPU job from the start already counts them
local function refuse_whole_node_move(job_desc, job_rec, part_list)
  if (get(job_desc, "partition") or "") == "" then
    return
  end
  local whole = whole_node_partition(job_desc, part_list)
  if whole ~= nil then
    fail("job " .. tostring(job_rec.job_id) .. " cannot move to partition " .. whole .. " by an update (every job there takes whole nodes with their GPUs): submit a new job to it")
  end
end

-- An Operator's own hold (scontrol hold or uhold; the controller's carries CONTROLLER_HOLD) is also
-- marked where the owner cannot change it: their scontrol hold of a job an admin holds would otherwise
-- replace ADMIN_HELD_BEGIN with HELD_BEGIN (Slurm ignores the hold itself, the priority being 0
-- already), and the controller would no longer see the admin's hold (recorded:
-- tests/fixtures/slurm/owner_hold_of_held.txt). The plugin can neither read a job's begin time nor,
-- on an Operator's update, write its admin comment (only SlurmUser and Administrators may), so the mark
-- is a site factor: only Operators and this plugin can set it, and it weighs nothing while the job's
-- priority is 0. A job whose site factor the site sets itself is not marked. The owner's own hold is
-- marked -3, so that a start time they set later does not replace its begin time: by the plugin for
-- a job of its own, by the controller (scontrol update SiteFactor=-3) for an array's records, because
-- slurmctld carries what the plugin wrote for one record of an array over to the next, and refuses
-- that as the owner's own (recorded: tests/fixtures/slurm/owner_start_time.txt). The marks end with
-- the controller's or an Operator's update.
-- (Lua's number becomes slurmctld's uint32 before its offset is added: -2 would read as NO_VAL, "unset")
local OPERATOR_HOLD_SITE = -1
local OWNER_HOLD_SITE = -3

-- JOB_PENDING is 0 in the low byte of job_state (the high bits are flags such as REQUEUED)
local function is_pending(job_rec)
  return (job_rec.job_state or 0) % 256 == 0
end

local function operator_held(job_rec)
  return job_rec.site_factor == OPERATOR_HOLD_SITE
end

-- a hold's mark, unless the site sets the job's site factor itself
local function mark(job_desc, job_rec, site)
  if job_rec.site_factor == 0 then
    job_desc.site_factor = site
  end
end

-- the update clears the mark of a hold that ends with it
local function unmark(job_desc, job_rec)
  if job_rec.site_factor == OPERATOR_HOLD_SITE or job_rec.site_factor == OWNER_HOLD_SITE then
    job_desc.site_factor = 0
  end
end

-- An admin's hold or release of a waiting hivebatch job (the controller's own hold carries
-- CONTROLLER_HOLD and does not come here). A hold is marked so the controller does not release it (seen
-- on the lab: an admin's scontrol hold was released as soon as the job's VC had room). An admin's release of a
-- job not pinned yet is parked behind a far begin time as an owner's is: Slurm would otherwise start it
-- without GPUs before the controller takes it back (seen on the lab: reason None, no begin time). The
-- controller itself releases only pinned jobs, but for one past its --deadline, whose begin time it
-- clears after the release so that Slurm ends it.
local function operator_update(job_desc, job_rec)
  local pending = is_pending(job_rec)
  local priority = get(job_desc, "priority")
  if not pending then
    return
  end
  if priority == 0 then
    job_desc.begin_time = ADMIN_HELD_BEGIN
    mark(job_desc, job_rec, OPERATOR_HOLD_SITE)
    slurm.log_info("hivebatch: an Operator held job %s; the controller leaves it until it is released", tostring(job_rec.job_id))
  elseif priority ~= nil and priority ~= NO_VAL then
    unmark(job_desc, job_rec)
    if priority == INFINITE and job_rec.priority == 0 and #split_gpu(job_rec.tres_per_node) == 0 then
      job_desc.begin_time = RELEASED_BEGIN
      slurm.log_info("hivebatch: admin released job %s before it was pinned; waiting for the controller", tostring(job_rec.job_id))
    end
  end
end

-- A start time is the owner's to set while the plugin's own hold keeps a waiting job (the controller
-- waits for it) or once the job is pinned and released (Slurm starts it then, the controller takes
-- it back if that is too late), but not over a mark: an owner's or an Operator's hold, their release
-- the controller has not taken back yet (Slurm would start the job without its GPUs), or the far
-- begin time that keeps a job holding an earlier pin's GPUs (requeued, taken back) from starting there.
local function start_time_free(job_rec, waiting)
  if waiting then
    return job_rec.priority == 0 and job_rec.site_factor == 0
  end
  return job_rec.priority ~= 0
end

local function start_refused(job_rec)
  return "the start time of hivebatch job " .. tostring(job_rec.job_id) .. " cannot change while it is held, just released, or keeps the GPUs of an earlier run: set it once hq shows it waiting for GPUs"
end

-- An owner's start time for a waiting job: (the time to note for the controller, whether Slurm takes it).
-- Over a hold's or a release's mark, plain Slurm keeps the hold and takes the time (recorded:
-- tests/fixtures/slurm/owner_start_time.txt, job 2569): the mark stays, and the controller keeps the time
-- in its ledger and gives it back when it takes the job back. Every start time of a waiting job is
-- noted, so that one set and released before the controller's next cycle is not lost. Not over the mark
-- of an array's record (slurmctld carries the plugin's change of the update to its next record) or of
-- a job that keeps an earlier pin's GPUs, nor where the note cannot be written.
local function start_time(job_desc, job_rec, waiting)
  local free = start_time_free(job_rec, waiting)
  if not waiting then
    if not free then
      fail(start_refused(job_rec))
    end
    return nil, true
  end
  local begin = get(job_desc, "begin_time")
  if not free then
    if (job_rec.array_job_id or 0) ~= 0 or (SITE.refusals_file or "") == "" then
      fail(start_refused(job_rec))
    end
    job_desc.begin_time = 0 -- no change: the mark stays
  end
  return begin, free
end

-- An owner may change the GPU ask (Gres=, TresPerNode=, TresPerJob=, ...) or the node count (NumNodes=)
-- of a job still waiting for GPUs, as plain Slurm lets them (tests/fixtures/slurm/owner_gpu_update.txt).
-- The plugin cannot write the admin comment on an owner's update (only SlurmUser and Administrators
-- may), so the new ask goes to the controller as a note in the file only slurmctld's user writes
-- (controller.refusals_file), and the controller's ledger keeps it. The ask is what this plugin would
-- have recorded had the job been submitted with the update's options; the node count stays the one
-- recorded (or noted by an earlier update) unless the update gives one. An array's ask is noted once
-- for the whole array: slurmctld hands the update to each of its records in turn, the array's own record
-- first, and it takes the GPU fields off for all that follow (so plain Slurm, too, changes only that
-- record: tests/fixtures/slurm/owner_gpu_update.txt); the controller gives the ask to each task still
-- waiting and to those it splits off later. Not for a job (or an array's task) whose GPUs are chosen,
-- one asking GPUs per task, or a site without the notes file: there the update is refused as before.
local ASK_FIELDS = { "gpus", "nodes", "gpus_per_node", "gpu_mem_mib", "gpu_type" }

-- a number or string this plugin wrote into its own flat admin comment
local function recorded(admin_comment, key)
  local n = string.match(admin_comment, '"' .. key .. '":(%d+)')
  if n ~= nil then
    return tonumber(n)
  end
  return string.match(admin_comment, '"' .. key .. '":"([^"]*)"')
end

-- the GPU fields a submission of the recorded ask would have carried, and its recorded node count
local function submitted_ask(admin_comment)
  local gpu_type = recorded(admin_comment, "gpu_type")
  local typed = gpu_type and (string.lower(gpu_type) .. ":") or ""
  local mem = recorded(admin_comment, "gpu_mem_mib")
  if mem ~= nil then
    return { tres_per_node = string.format("gres:shard:%s%d", typed, mem / SITE.shard_mib) }, 1
  end
  local per_node = recorded(admin_comment, "gpus_per_node")
  if per_node ~= nil then
    return { tres_per_node = "gres:gpu:" .. typed .. per_node }, recorded(admin_comment, "nodes")
  end
  return { tres_per_job = "gres:gpu:" .. typed .. tostring(recorded(admin_comment, "gpus")) }, recorded(admin_comment, "nodes")
end

-- the ask an earlier update of the job noted, which its admin comment does not hold: the latest line for
-- it since it was submitted (a job id Slurm gave again is another job), in the file or the rotated one
local function noted_ask(job_rec)
  local since = tonumber(job_rec.submit_time) or 0
  local own = ',"job":' .. tostring(job_rec.job_id) .. ','
  local array = (job_rec.array_job_id or 0) ~= 0 and (',"array":' .. tostring(job_rec.array_job_id) .. ',') or own
  for _, path in ipairs({ SITE.refusals_file, SITE.refusals_file .. ".1" }) do
    local f = io.open(path, "r")
    if f ~= nil then
      local last = nil
      for line in f:lines() do
        if string.find(line, own, 1, true) or string.find(line, array, 1, true) then
          local t, ask = string.match(line, '^{"t":(%d+),"job":%d+,"uid":%d+,[^{]*"ask":(%b{})}$')
          if ask ~= nil and tonumber(t) >= since then
            last = ask
          end
        end
      end
      f:close()
      if last ~= nil then
        return last
      end
    end
  end
  return nil
end

local function asks_new_shape(job_desc, found)
  return next(found) ~= nil or is_set(get(job_desc, "min_nodes")) or is_set(get(job_desc, "max_nodes"))
end

local function ask_changeable(job_rec, waiting, pending)
  return waiting and pending and (SITE.refusals_file or "") ~= "" and recorded(job_rec.admin_comment, "gpus_per_task") == nil
end

-- the request the update asks for, checked as a submission's; the job's own fields lose their GPUs
local function changed_ask(job_desc, job_rec, found, rest)
  local ac = job_rec.admin_comment
  local exclusive = recorded(ac, "exclusive") and "--exclusive" or nil
  if exclusive and next(found) ~= nil then
    fail("hivebatch job " .. tostring(job_rec.job_id) .. " takes whole nodes with all their GPUs: change its node count (NumNodes=), not its GPUs")
  end
  local old, old_nodes = submitted_ask(noted_ask(job_rec) or ac)
  local account, qos = get(job_desc, "account"), get(job_desc, "qos")
  local view = {
    account = (account ~= nil and account ~= "") and account or job_rec.account,
    qos = (qos ~= nil and qos ~= "") and qos or job_rec.qos,
  }
  for f, v in pairs(next(found) ~= nil and {} or old) do
    view[f] = v
  end
  for f in pairs(found) do
    view[f] = get(job_desc, f)
  end
  local min_nodes, max_nodes = get(job_desc, "min_nodes"), get(job_desc, "max_nodes")
  if is_set(min_nodes) then
    view.min_nodes, view.max_nodes = min_nodes, max_nodes
  elseif old_nodes ~= nil then
    view.min_nodes, view.max_nodes = old_nodes, old_nodes
  end
  NOTES, ROUNDED, TASKS = {}, nil, nil
  local req = M.request(view, gpu_fields(view), exclusive)
  local wanted = get(job_desc, "req_nodes")
  if type(wanted) == "string" and wanted ~= "" and nodes_needed(req) > #M.expand_hostlist(wanted) then
    fail("ReqNodeList names " .. #M.expand_hostlist(wanted) .. " node(s) but the job would run on " .. nodes_needed(req) .. ": list as many nodes, or leave the node list out")
  end
  for f, kept in pairs(rest) do
    job_desc[f] = kept
  end
  -- --cpus-per-gpu and --mem-per-gpu were made per-node figures at submit: they follow the new count
  local per_node = req.gpus_per_node or req.gpus
  local cpus, mem = recorded(ac, "cpus_per_gpu"), recorded(ac, "mem_per_gpu_mb")
  if cpus ~= nil then
    job_desc.pn_min_cpus = cpus * per_node
  end
  if mem ~= nil then
    job_desc.min_mem_per_node = mem * per_node
  end
  local ask = {}
  for _, k in ipairs(ASK_FIELDS) do
    ask[k] = req[k]
  end
  return ask
end

-- slurmctld 22.05 counts a waiting job's CPUs again from its CPUs per task only when the same update
-- gives its node count (job_mgr.c _update_job): `scontrol update JobId=N CPUsPerTask=16` alone kept
-- NumCPUs=1, and a 2-node job then started with its GPUs on one node only, while hivebatch's pin
-- named both (recorded: tests/fixtures/slurm/update_cpus_per_task.txt). The node count it has makes
-- Slurm count them as at submit; the owner cannot give it, the node count being hivebatch's.
local function carry_cpus_per_task(job_desc, job_rec)
  if is_pending(job_rec) and is_set(get(job_desc, "cpus_per_task")) and not is_set(get(job_desc, "min_nodes")) and is_set(job_rec.min_nodes) and job_rec.min_nodes > 0 then
    job_desc.min_nodes = job_rec.min_nodes
  end
end

local function modify(job_desc, job_rec, part_list, submit_uid)
  local managed = string.sub(job_rec.admin_comment or "", 1, #PREFIX) == PREFIX
  if is_operator(submit_uid) then
    if get(job_desc, "begin_time") == CONTROLLER_HOLD then
      -- the controller's hold, of any job, is a plain hold; a waiting job that kept the GPUs of an
      -- earlier pin (taken back, requeued) is parked as well, or an admin's release would let Slurm
      -- start it there at once, on GPUs the cells have given to others. The controller clears the
      -- begin time when it places the job again.
      local kept = managed and #split_gpu(job_rec.tres_per_node) > 0
      job_desc.begin_time = kept and RELEASED_BEGIN or 0
      if managed then
        unmark(job_desc, job_rec) -- this hold is the controller's
      end
    elseif managed then
      operator_update(job_desc, job_rec)
      carry_cpus_per_task(job_desc, job_rec)
    end
    return slurm.SUCCESS
  end
  if not managed then
    local asked = gpu_fields(job_desc)
    if next(asked) ~= nil then
      fail("GPUs cannot be added to job " .. tostring(job_rec.job_id) .. " by an update: submit a new job that asks for them")
    end
    if EXCLUSIVE[get(job_desc, "shared")] and reaches_gpu_nodes(job_desc, part_list, job_rec.partition) then
      fail("job " .. tostring(job_rec.job_id) .. " cannot be made --exclusive by an update (it would take the GPUs of its nodes): submit a new job")
    end
    refuse_whole_node_move(job_desc, job_rec, part_list)
    return slurm.SUCCESS
  end
  if not recorded(job_rec.admin_comment, "exclusive") then
    refuse_whole_node_move(job_desc, job_rec, part_list)
  end
  check_class_change(job_desc, job_rec)
  local waiting = #split_gpu(job_rec.tres_per_node) == 0
  local pending = is_pending(job_rec)
  local found, rest = gpu_fields(job_desc)
  local ask, asked_fields = nil, {}
  local start, start_free = nil, true
  if asks_new_shape(job_desc, found) and ask_changeable(job_rec, waiting, pending) then
    ask = changed_ask(job_desc, job_rec, found, rest)
    -- Slurm keeps the node count and what the GPU fields hold besides GPUs
    asked_fields = { min_nodes = true, max_nodes = true }
    for f in pairs(found) do
      asked_fields[f] = true
    end
  end
  for f, what in pairs(GUARDED) do
    local v = get(job_desc, f)
    local owners = asked_fields[f] or (OWNERS_WHILE_WAITING[f] and waiting and pending) or (SLURMS_ONCE_STARTED[f] and not pending)
    -- a cleared list ("ReqNodeList=") counts too: a pinned job's node list is its pin
    local given = (type(v) == "string" and (v ~= "" or OWNERS_WHILE_WAITING[f])) or (type(v) == "number" and is_set(v))
    if given and not owners then
      fail(what .. " of hivebatch job " .. tostring(job_rec.job_id) .. " is set by hivebatch: cancel and resubmit to change it")
    end
  end
  carry_cpus_per_task(job_desc, job_rec)
  -- until the controller has pinned it (its GPUs back on the job), Slurm must not start the job:
  -- a plugin-set priority 0 is a *user* hold on 22.05, so the owner may release it; it then stays
  -- pending behind a far begin time, which the controller reads as "released by the owner"
  local priority = get(job_desc, "priority")
  if pending and priority == 0 and job_rec.priority == 0 and operator_held(job_rec) then
    -- plain Slurm ignores an owner's hold of a job an admin holds: the admin's hold stands
    slurm.log_info("hivebatch: owner's hold of job %s, which an Operator holds, changes nothing", tostring(job_rec.job_id))
  elseif pending and priority == 0 then
    job_desc.begin_time = HELD_BEGIN
    if (job_rec.array_job_id or 0) == 0 then
      -- marked at once, so that a start time set before the controller's next cycle cannot replace
      -- the hold (recorded: owner_start_time.txt); an array's records are marked by the controller
      mark(job_desc, job_rec, OWNER_HOLD_SITE)
    end
    slurm.log_info("hivebatch: owner held job %s; the controller leaves it until they release it", tostring(job_rec.job_id))
  elseif waiting and job_rec.priority == 0 and priority == INFINITE then
    job_desc.begin_time = RELEASED_BEGIN
    slurm.log_info("hivebatch: owner released job %s; waiting for the controller", tostring(job_rec.job_id))
  elseif pending and (get(job_desc, "begin_time") or 0) > 0 then
    start, start_free = start_time(job_desc, job_rec, waiting)
  end
  -- an update of the array's own record is one of the whole array (a task's has its own job id); the
  -- controller splits tasks off ahead of their start, which plain Slurm keeps in that record
  local whole_array = (job_rec.array_job_id or 0) ~= 0 and job_rec.job_id == job_rec.array_job_id
  if ask ~= nil and not M.note_ask(job_rec.job_id, submit_uid, ask, whole_array and job_rec.array_job_id or nil) then
    fail("the new GPU ask of hivebatch job " .. tostring(job_rec.job_id) .. " cannot be passed to hivebatch now (its notes file cannot be written): try again later, or tell your admin")
  end
  if start ~= nil and not M.note_start(job_rec.job_id, submit_uid, start) and not start_free then
    fail(start_refused(job_rec))
  end
  return slurm.SUCCESS
end

-- slurmctld drops a job_modify message: the owner sees only "Access/permission denied". The
-- refusal is also noted, one JSON line each, in a file the controller reads, so that hq says what
-- to change. The file is rotated once it passes a megabyte; a site without its directory has no notes.
local NOTES_MAX_BYTES = 1048576

-- one line appended to the notes file; false where it cannot be written
local function append_note(line)
  local path = SITE.refusals_file
  if path == nil or path == "" then
    return false
  end
  local f = io.open(path, "a")
  if f ~= nil and f:seek("end") > NOTES_MAX_BYTES then
    f:close()
    os.rename(path, path .. ".1")
    f = io.open(path, "a")
  end
  if f == nil then
    return false
  end
  local ok = f:write(line)
  f:close()
  return ok ~= nil
end

function M.note_refusal(job_id, uid, msg)
  append_note(string.format('{"t":%d,"job":%d,"uid":%d,"msg":%s}\n', os.time(), job_id, uid, json_value(msg)))
end

-- a start time an owner set on a waiting job, for the controller (owner_start.py)
function M.note_start(job_id, uid, begin)
  return append_note(string.format('{"t":%d,"job":%d,"uid":%d,"begin":%d}\n', os.time(), job_id, uid, begin))
end

-- an owner's new GPU ask for the controller (owner_ask.py): the request fields it replaces, for the job
-- or for every waiting task of its array
function M.note_ask(job_id, uid, ask, array_id)
  local array = (array_id or 0) ~= 0 and string.format('"array":%d,', array_id) or ""
  return append_note(string.format('{"t":%d,"job":%d,"uid":%d,%s"ask":%s}\n', os.time(), job_id, uid, array, flat_json(ask)))
end

local ON_REFUSAL = {
  job_modify = function(msg, _, job_rec, _, submit_uid)
    M.note_refusal(job_rec.job_id, submit_uid, msg)
  end,
}

-- pcall wrapper: an error refuses the job with one line instead of letting it through unmanaged
-- (slurmctld passes the submit message to sbatch, but drops it on modify: the error code is all the user sees)
local function guarded(name, refusal, fn, ...)
  CURRENT, NODES_READ = nil, nil
  local ok, rc = pcall(fn, ...)
  if ok then
    return rc
  end
  local msg
  if type(rc) == "table" and rc.hivebatch then
    msg = "hivebatch: " .. rc.hivebatch
    slurm.log_info("%s refused: %s", name, msg)
  else
    msg = "hivebatch: internal error in the job_submit plugin; the job was not accepted (admins: see slurmctld.log)"
    slurm.log_error("hivebatch %s: %s", name, tostring(rc))
  end
  if refusal == slurm.ERROR then
    slurm.log_user("%s", msg)
  end
  if ON_REFUSAL[name] ~= nil then
    local noted, err = pcall(ON_REFUSAL[name], msg, ...)
    if not noted then
      slurm.log_error("hivebatch: could not note the refusal for the controller: %s", tostring(err))
    end
  end
  return refusal
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  return guarded("job_submit", slurm.ERROR, submit, job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, submit_uid)
  return guarded("job_modify", slurm.ESLURM_ACCESS_DENIED, modify, job_desc, job_rec, part_list, submit_uid)
end

HIVEBATCH = M
