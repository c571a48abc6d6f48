-- hivebatch's cli_filter for srun (and sbatch's --test-only), next to slurm.conf on every host users run srun on
-- (`hadmin slurm-config` writes it and sets CliFilterPlugins=cli_filter/lua).
--
-- hivebatch pins a job's GPUs as one GRES type per GPU index (gpu:g0:1,gpu:g1:1). srun starts its
-- steps with its own GPU options, and slurmctld checks them against the job's GRES one record at a
-- time: a per-node count over 1 meets a one-GPU record, and a GPU type meets none, so
-- `srun --gres=gpu:2 python train.py` was refused after the job had been placed, inside a batch job
-- as well as on its own (recorded: tests/fixtures/slurm/srun_step_gres.txt). A per-step count
-- (--gpus=N) starts on one node, so on one node this filter asks srun for the same GPUs that way:
--
--   * inside a job (SLURM_JOB_ID set, or srun --jobid), a step on one node: --gres=gpu[:TYPE]:N or
--     --gpus-per-node=N becomes --gpus=N (the job's GPUs are all of one type, the one it was placed
--     by); a step over all the job's K nodes asking all the GPUs of each (N = SLURM_GPUS_ON_NODE, or
--     in salloc's shell the job's own SLURM_GPUS_PER_NODE) becomes --gpus=N*K, which can only be
--     taken N from each node. This is how an srun inside `sbatch -N 2 --gpus-per-node=4` starts: it
--     reads SLURM_GPUS_PER_NODE=4 from the job's environment. A step over K nodes with one task on
--     each asking fewer GPUs than the job holds there, or in the shell of salloc --gres=gpu:N (which
--     does not say), or attached from outside with --jobid, asks N per task instead. A step's own
--     --gpus or --gres beside that read-back ask is what the step gets, as under plain Slurm;
--   * a new job (srun on a login node) with no node count, or one node: --gres=gpu:N or
--     --gpus-per-node=N becomes --gpus=N. hivebatch places it on one node, unless its tasks need
--     more (srun -n 32 on 16-CPU nodes): then, as Slurm spreads it, on as many as they need (K, from
--     the CPUs and memory sinfo lists for the GPU nodes), with N GPUs on each, as on exactly K nodes.
--     On exactly K nodes (-N K, or the K nodes -w names) it becomes N per task with one task per node,
--     or with more tasks the total --gpus=N*K, which the plugin gives as N on each node: the step
--     takes them as under plain Slurm (not for an Operator, whose job the plugin leaves to Slurm);
--   * a GPU model named to srun (--gres=gpu:v100:2, --gpus=v100:2, --gpus-per-task=v100:1), inside a
--     job or read from its environment, is dropped from the step's ask; a new job keeps it as a
--     --constraint, if it is one of the cluster's models (HIVEBATCH_GPU_MODELS, written above). A
--     step inside a job that names a model the cluster does not have is refused, as Slurm refuses a
--     step whose GPU type its job lacks (M.refusal).
--
-- sbatch's and srun's --test-only with a GPU ask is told that Slurm's answer is not hivebatch's, and
-- what gives hivebatch's (M.test_only_note).
--
-- A new job's --signal goes to the job_submit plugin in front of its comment (M.signal_comment): its
-- preemption notice uses it.
--
-- Anything else is left to the job_submit plugin, which refuses what cannot start with a line that
-- says what does. The filter only rewrites a user's own options (and refuses the step above, which
-- Slurm would refuse too); it trusts nothing and enforces nothing (a user could skip it), the plugin does.

local M = {}

-- the GPU count of an option value with one untyped or typed GPU item ("gres:gpu:2", "gpu:v100:2",
-- "2"), with its type and the option's other items; nil when it has no such item
function M.gpu_item(value)
  if value == nil or value == "" then
    return nil
  end
  local count, typ, others = nil, nil, {}
  for part in string.gmatch(value, "[^,]+") do
    local body = part:gsub("^gres[:/]", "")
    local f = {}
    for x in string.gmatch(body, "[^:]+") do
      f[#f + 1] = x
    end
    if #f == 1 and f[1]:match("^%d+$") then
      count = tonumber(f[1])
    elseif f[1] == "gpu" and #f == 2 and f[2]:match("^%d+$") then
      count = tonumber(f[2])
    elseif f[1] == "gpu" and #f == 3 and f[3]:match("^%d+$") then
      count, typ = tonumber(f[3]), f[2]
    elseif f[1] == "gpu" then
      return nil -- "gpu" alone or a form srun itself will explain
    else
      others[#others + 1] = body
    end
  end
  if count == nil then
    return nil
  end
  return count, typ, others
end

-- srun's node count option ("1-0" when not given, "2", "2-3") as its minimum and maximum
local function node_range(value)
  local lo, hi = string.match(value or "", "^(%d+)%-?(%d*)$")
  return tonumber(lo or "1"), tonumber(hi ~= "" and hi or lo or "0")
end

-- how many hosts a --nodelist names ("node[1-3,5],gpu7" -> 5); nil for a file of names (srun reads
-- it later) or a form this does not read
function M.count_hosts(list)
  if list == nil or list == "" then
    return 0
  end
  if string.find(list, "/", 1, true) then
    return nil
  end
  local total = 0
  -- commas inside brackets separate ranges of one name, outside them names
  local names = string.gsub(list, "%b[]", function(b)
    return (string.gsub(b, ",", ";"))
  end)
  for item in string.gmatch(names, "[^,]+") do
    local n = 1
    for inside in string.gmatch(item, "%[([^%]]*)%]") do
      local k = 0
      for part in string.gmatch(inside, "[^;]+") do
        local a, b = string.match(part, "^(%d+)%-(%d+)$")
        if a ~= nil then
          k = k + tonumber(b) - tonumber(a) + 1
        elseif string.match(part, "^%d+$") then
          k = k + 1
        else
          return nil
        end
      end
      n = n * k
    end
    total = total + n
  end
  return total
end

-- how many nodes the step or new job srun is about to start spans: 1, all K of its job (0 when srun
-- attaches to a job with --jobid, whose size only the job's own environment says), or a new job's
-- exact count (-N K, or the K nodes -w names); nil when that is not known here. A new job with
-- no node count counts as one node (its tasks may need more: the controller spreads them as Slurm).
-- Inside a job srun reads SLURM_NNODES as its -N, and then -w only names nodes the step must include:
-- plain Slurm ran `srun -w node1` inside a 2-node batch job on both nodes, and on node1 alone once
-- SLURM_NNODES was unset (tests/fixtures/slurm/srun_new_job_nodes.txt).
function M.span(nodes, nodelist, in_job, job_nodes)
  local lo, hi = node_range(nodes)
  local listed = M.count_hosts(nodelist)
  if listed == nil or (hi > 0 and listed > hi) then
    return nil
  end
  if hi == 0 and listed > 0 then
    lo, hi = listed, listed -- Slurm takes the listed nodes
  end
  if in_job then
    local n = tonumber(job_nodes or "")
    if hi == 0 then
      return n or 0 -- a step spans the whole allocation unless told otherwise (0: of a size unknown here)
    end
    return (lo == hi and (lo == 1 or lo == n or n == nil)) and lo or nil
  end
  return (hi == 0 or lo == hi) and math.max(hi, 1) or nil
end

-- whether srun starts a step in an existing job: inside one (SLURM_JOB_ID), or attached to one from
-- outside (--jobid), and that job's node count where its environment says it
local function job_of_step(get, env)
  local target = get("jobid")
  if target == nil or target == "unset" or target == env("SLURM_JOB_ID") then
    return env("SLURM_JOB_ID") ~= nil, env("SLURM_JOB_NUM_NODES"), env("SLURM_JOB_ID")
  end
  return true, nil, target
end

-- a job's node count and its GPUs on each node as Slurm lists them (TresPerNode: a pinned job's
-- per-index items, gres:gpu:g0:1,gres:gpu:g1:1), for a step whose environment does not say (salloc's
-- shell has no SLURM_GPUS_ON_NODE, srun --jobid none of the job's); nil where Slurm does not answer.
-- Only a job id of digits reaches the command.
function M.job_figures(id)
  if not string.match(id or "", "^%d+$") then
    return nil
  end
  local pipe = io.popen("scontrol show job -o " .. id .. " 2>/dev/null")
  if pipe == nil then
    return nil
  end
  local line = pipe:read("*a") or ""
  pipe:close()
  local per_node = 0
  for item in string.gmatch(string.match(line, "TresPerNode=(%S+)") or "", "[^,]+") do
    per_node = per_node + (M.gpu_item(item) or 0)
  end
  return tonumber(string.match(line, "NumNodes=(%d+)") or ""), per_node > 0 and per_node or nil
end

-- whether srun runs as one of the Operators (HIVEBATCH_OPERATORS, written above this file by name),
-- whose jobs the plugin leaves as Slurm has them. The login name is the user's to set, and all it
-- changes is whether their own ask is rewritten: the plugin refuses what the filter leaves.
function M.operator(env)
  local names = HIVEBATCH_OPERATORS or {}
  return names[env("USER") or env("LOGNAME") or ""] == true
end

-- srun options whose [type:]count a step inherits from its job's environment (SLURM_GPUS=v100:2 of
-- `sbatch --gpus=v100:2`): the job's GPUs are pinned as per-index types (g0, g1, …), so a model type
-- matches none of them and the step was refused "Step requested GRES (gpu:v100) not found in the job"
-- (tests/fixtures/slurm/step_typed_gpus.txt). The job's GPUs are all of the type it was placed by.
local COUNT_OPTIONS = { "gpus", "gpus-per-node", "gpus-per-task" }

-- a --gpus* value without its type ("v100:2" -> "2", "v100"), or nil when it names none
local function untype_count(value)
  local t, n = string.match(value or "", "^(%a[%w_%-]*):(%d+)$")
  return n, t
end

-- a --gres value without the type of its GPU item ("gres:gpu:v100:2,gres:nic:1" -> "gpu:2,nic:1",
-- "v100"), or nil when it names none
local function untype_gres(value)
  local out, typ = {}, nil
  for part in string.gmatch(value or "", "[^,]+") do
    local body = part:gsub("^gres[:/]", "")
    local t, n = string.match(body, "^gpu:(%a[%w_%-]*):(%d+)$")
    if t ~= nil and typ == nil then
      typ, out[#out + 1] = t, "gpu:" .. n
    elseif t ~= nil then
      return nil -- two GPU items: the plugin says what to do
    else
      out[#out + 1] = body
    end
  end
  if typ == nil then
    return nil
  end
  return table.concat(out, ","), typ
end

-- a new job's GPU model as the --constraint that picks its nodes (hivebatch's slurm.conf names each
-- node's model as a feature), joined to the owner's own; nil for a model the cluster lacks (the
-- plugin names those it has: HIVEBATCH_GPU_MODELS is written above this file) and for forms only
-- Slurm reads
local function model_constraint(model, own)
  own = own or ""
  local models = HIVEBATCH_GPU_MODELS or {}
  if not models[string.lower(model)] or string.find(own, "[|%[%]%(%)%*]") then
    return nil
  end
  return own == "" and string.lower(model) or own .. "&" .. string.lower(model)
end

-- the options to set (name -> value) for srun's GPU ask, or nil to leave it as given, and what to tell
-- the user of them (nil: nothing). A GPU model
-- named to srun, inside a job or for a new one, is dropped from the step's ask: it matches none of
-- the per-index pins. A new job keeps it as a --constraint, which the controller places by.
function M.rewrite(get, env)
  if get("type") ~= "srun" then
    return nil
  end
  local in_job = job_of_step(get, env)
  local untyped, model = {}, nil
  for _, name in ipairs(COUNT_OPTIONS) do
    local n, t = untype_count(get(name))
    if n ~= nil and not in_job and model ~= nil and t ~= model then
      return nil -- two models: the plugin says what to do
    end
    untyped[name], model = n, model or t
  end
  local constraint = nil
  if not in_job then
    local g, t = untype_gres(get("gres"))
    if g ~= nil and model ~= nil and t ~= model then
      return nil
    end
    untyped.gres, model = g, model or t
    if model ~= nil then
      constraint = model_constraint(model, get("constraint"))
      if constraint == nil then
        return nil
      end
    end
  end
  local set, note = M.rewrite_counts(function(name)
    return untyped[name] or get(name)
  end, env, model and string.lower(model))
  for _, name in ipairs({ "gres", "gpus", "gpus-per-node", "gpus-per-task" }) do
    if untyped[name] ~= nil then
      set = set or {}
      set[name] = set[name] or untyped[name]
    end
  end
  if constraint ~= nil then
    set.constraint = constraint
  end
  return set, note
end

-- inside a job, a step that names a GPU model the cluster does not have: Slurm refuses a step whose
-- GRES type its job lacks ("Step requested GRES (gpu:v100) not found in the job",
-- tests/fixtures/slurm/step_typed_gpus.txt), so it is refused in the plugin's words rather than run
-- on the job's GPUs once M.rewrite has dropped the model. nil: nothing to refuse (or no models list
-- above the filter, as from a hivebatch before it wrote one)
function M.refusal(get, env)
  local models = HIVEBATCH_GPU_MODELS
  if get("type") ~= "srun" or not job_of_step(get, env) or models == nil then
    return nil
  end
  local named = {}
  for _, name in ipairs(COUNT_OPTIONS) do
    local _, t = untype_count(get(name))
    named[#named + 1] = { t, "--" .. name }
  end
  local _, gres_type = M.gpu_item(get("gres"))
  named[#named + 1] = { gres_type, "--gres" }
  for _, item in ipairs(named) do
    local t, where = item[1], item[2]
    if t ~= nil and not models[string.lower(t)] then
      local known = {}
      for m in pairs(models) do
        known[#known + 1] = m
      end
      table.sort(known)
      return "GPU type '" .. t .. "' in " .. where .. " is not on this cluster (types: " .. table.concat(known, ", ") .. ")"
    end
  end
  return nil
end

-- a new job or a step on K nodes asking N GPUs on each: with one task per node (srun's default) as
-- N per task, which each node gives whole whatever the job holds there (a job that shares its nodes,
-- one that takes them whole, salloc's, whose shell does not say how many it holds); with more tasks
-- as the total N*K where ``total_nodes()`` gives K, each node giving the job just N. nil: left to the plugin or
-- Slurm, which say what starts. Slurm takes a total from whole nodes unevenly (3 + 1 of --gpus=4 on
-- two --exclusive nodes) and a per-task count stays with whole tasks
-- (tests/fixtures/slurm/srun_new_job_nodes.txt).
local function over_nodes(get, count, k, total_nodes, new_job)
  if (get("gpus-per-task") or "") ~= "" then
    return nil
  end
  local tasks = tonumber(get("ntasks") or "") or 1
  local per_node = tonumber(get("ntasks-per-node") or "") or -2 -- srun lists it unset as -2
  if (tasks <= 1 or tasks == k) and (per_node <= 0 or per_node == 1) then
    -- a step takes one task per node of its own; a new job is told, as srun refuses --gpus-per-task
    -- without a task count where -w alone sets its nodes. A step is not: srun --jobid=J from outside
    -- the job then took one node instead of all of J's
    return new_job and { ["gpus-per-task"] = tostring(count), ["ntasks-per-node"] = "1" }
      or { ["gpus-per-task"] = tostring(count) }
  end
  local nodes = total_nodes()
  return nodes and { gpus = tostring(count * nodes) } or nil
end

-- the most CPUs and memory (MB) one job gets of a GPU node (of ``model``, a node feature, where one is
-- named) in ``partition`` (srun's -p, a comma list; nil: the default one, which sinfo marks with *), and
-- the fewest and most nodes (0: any) those partitions run a job on, the loosest of them, in what
-- `sinfo -h -N -o '%N %c %m %f %G %P %B %s'` lists: a node once for each of its partitions, whose
-- MaxCPUsPerNode (%B) bounds the CPUs a job gets there and whose MinNodes-MaxNodes (%s) bound its node
-- count (tests/fixtures/slurm/sinfo_node_sizes.txt, partition_max_cpus.txt, partition_node_limits.txt).
-- The node size the controller spreads a job's tasks by; nil: no such node
function M.parse_node_sizes(text, model, partition)
  local asked = {}
  for name in string.gmatch(partition or "", "[^,]+") do
    asked[name] = true
  end
  local cpus, mem, range = 0, 0, nil
  for line in string.gmatch(text or "", "[^\n]+") do
    local c, m, features, gres, part, cap, lo, hi =
      string.match(line, "^%S+%s+(%d+)%s+(%d+)%s+(%S+)%s+(%S+)%s+(%S+)%s+(%S+)%s+(%d+)%-?(%S*)")
    local of_model = model == nil or string.find("," .. string.lower(features or "") .. ",", "," .. model .. ",", 1, true)
    local name, default = string.match(part or "", "^([^*]+)(%*?)$")
    local in_partition = (next(asked) == nil and default == "*") or asked[name]
    if c ~= nil and string.find("," .. gres, ",gpu:", 1, true) and of_model and in_partition then
      cpus, mem = math.max(cpus, math.min(tonumber(c), tonumber(cap) or math.huge)), math.max(mem, tonumber(m))
      -- "1" is a MaxNodes of 1, "2-infinite" a MinNodes of 2 with none
      range = HIVEBATCH_SPREAD.looser(range, tonumber(lo), hi == "" and tonumber(lo) or tonumber(hi) or 0)
    end
  end
  return cpus > 0 and { cpus = cpus, mem = mem, fewest = math.max(range.fewest, 1), most = range.most } or nil
end

-- a fixed command: the partition asked is matched here, never handed to a shell
function M.node_sizes(model, partition)
  local pipe = io.popen("sinfo -h -N -o '%N %c %m %f %G %P %B %s' 2>/dev/null")
  if pipe == nil then
    return nil
  end
  local text = pipe:read("*a")
  pipe:close()
  return M.parse_node_sizes(text, model, partition)
end

-- srun's --mem-per-cpu ("5000", "5G": Slurm prints it in its largest whole unit) in MB; nil when unset
local function mbytes(value)
  local n, unit = string.match(value or "", "^(%d+)([MGTP]?)$")
  if n == nil then
    return nil
  end
  return tonumber(n) * ({ [""] = 1, M = 1, G = 1024, T = 1024 ^ 2, P = 1024 ^ 3 })[unit]
end

-- how many nodes Slurm spreads a new job's tasks over when it has no node count, on nodes of ``size``
-- (HIVEBATCH_SPREAD, written above this file)
function M.tasks_nodes(get, size)
  if get("overcommit") == "set" then
    return 1 -- Slurm allocates as if one task ran on each node (tests/fixtures/slurm/overcommit.txt)
  end
  local on_node = tonumber(get("ntasks-per-node") or "") or -2 -- srun lists it unset as -2
  return (HIVEBATCH_SPREAD.nodes(
    tonumber(get("ntasks") or "") or 1,
    math.max(tonumber(get("cpus-per-task") or "") or 0, 1),
    mbytes(get("mem-per-cpu")) or 0,
    math.max(on_node, 0),
    size.cpus,
    size.mem
  ))
end

-- M.rewrite's per-node and per-step counts, with a step's types already dropped (``model``: a new
-- job's, kept as its constraint), and what to tell the user of them (nil: nothing)
function M.rewrite_counts(get, env, model)
  local in_job, job_nodes, target = job_of_step(get, env)
  -- a step's own --gpus beside the job's per-node ask srun read from SLURM_GPUS_PER_NODE: plain
  -- Slurm gave such a step the per-node count (tests/fixtures/slurm/step_gpu_env.txt)
  local given = get("gpus") or ""
  local step_total = tonumber(string.match(given, "^[%w_]-:?(%d+)$") or "")
  if given ~= "" and (step_total == nil or not in_job) then
    return nil
  end
  local count, typ, others, field = nil, nil, nil, nil
  local per_node_too = false
  for _, name in ipairs({ "gres", "gpus-per-node" }) do
    local c, t, o = M.gpu_item(get(name))
    if c ~= nil and count ~= nil then
      -- a step's --gres beside the per-node ask srun read from the job's SLURM_GPUS_PER_NODE:
      -- Slurm goes by the --gres (plain Slurm gave `srun --gres=gpu:1` one GPU there)
      per_node_too = true
    elseif c ~= nil then
      count, typ, others, field = c, t, o, name
    end
  end
  if count == nil or count < 1 then
    return nil
  end
  if not in_job and M.operator(env) then
    return nil -- the plugin pins no Operator's job: Slurm takes --gpus=N*K from K nodes unevenly
  end
  if typ ~= nil and not in_job then
    return nil -- a new job's GPU type is its owner's choice; the plugin says what to do
  end
  if count == 1 and typ == nil then
    return nil -- a one-GPU record holds it
  end
  -- a new job's node range (-N 1-2) runs on its fewest nodes, as the plugin runs sbatch's: a placement
  -- has one node count (plain Slurm takes as many of the range as are free)
  local lo, hi = node_range(get("nodes"))
  local unlisted = M.count_hosts(get("nodelist")) == 0
  local ranged = not in_job and hi > lo and unlisted
  -- a new job with no node count: Slurm gave `srun -n 32 --gres=gpu:2` 2 GPUs on each of the nodes its
  -- tasks took, and a partition's MinNodes as many nodes at least, so it asks for those nodes
  -- (tests/fixtures/slurm/srun_new_job_nodes.txt, partition_node_limits.txt)
  local unsized = not in_job and hi == 0 and unlisted
  local many = unsized and (tonumber(get("ntasks") or "") or 1) > 1
  local size = (ranged or unsized) and M.node_sizes(model, get("partition")) or nil -- (a new job's own --gpus was left as given above)
  local fewest = ranged and math.max(lo, size and size.fewest <= hi and size.fewest or lo) or nil
  local spread = (unsized and size) and math.max(M.tasks_nodes(get, size), size.fewest) or nil
  local beyond = spread ~= nil and size.most > 0 and spread > size.most
  if beyond then
    spread = nil -- asked as one node's total, which the plugin refuses, as Slurm does, saying why
  end
  local span = fewest or spread or M.span(get("nodes"), get("nodelist"), in_job, job_nodes)
  -- the job's GPUs on a node: slurmd tells a batch script; salloc's shell has only its own
  -- --gpus-per-node ask
  local held = env("SLURM_GPUS_ON_NODE") or env("SLURM_GPUS_PER_NODE")
  local set = nil
  if span == nil then
    return nil
  elseif span ~= 1 and step_total == nil then
    -- a total is taken evenly where each node gives the job just N: the plugin's pins of a new job
    -- that shares its nodes, or every GPU of each node of a job
    local says = job_nodes ~= nil and held ~= nil
    local function total_nodes()
      if not in_job then
        local exclusive = get("exclusive") or "unset"
        return (exclusive == "unset" or exclusive == "oversubscribe") and span or nil
      elseif says then
        return tostring(count) == held and span or nil
      end
      local nodes, per_node = M.job_figures(target)
      return (per_node == count and (span == 0 or span == nodes)) and nodes or nil
    end
    if in_job and says and tostring(count) == held then
      set = { gpus = tostring(count * span) }
    else
      set = over_nodes(get, count, span, total_nodes, not in_job)
    end
    if set == nil then
      return nil
    end
  elseif span ~= 1 then
    -- a step's own --gpus beside its job's per-node ask: every GPU of each node, or its own total
    if job_nodes == nil or tostring(count) ~= held then
      return nil
    end
    set = { gpus = tostring(math.max(count * span, step_total)) }
  else
    set = { gpus = tostring(math.max(count, step_total or 0)) }
  end
  if field == "gres" then
    -- a zero count asks for none: it keeps srun's other GRES and takes the GPUs out of the per-node ask
    table.insert(others, 1, "gpu:0")
    set.gres = table.concat(others, ",")
  end
  if field == "gpus-per-node" or per_node_too then
    set["gpus-per-node"] = "0"
  end
  local note = nil
  if fewest ~= nil then
    set.nodes = tostring(fewest)
    note = "-N " .. get("nodes") .. " runs on " .. set.nodes .. " nodes, the fewest it allows: a job gets one node count here"
  elseif spread ~= nil and spread > 1 then
    set.nodes = tostring(spread)
  elseif many and spread == nil and not beyond then
    -- Slurm did not list its nodes: the per-node ask became a total for one node, spread over the
    -- nodes the tasks need, where plain Slurm gave N on each
    note = "the per-node GPU ask counts as " .. set.gpus .. " GPUs in all, spread over the nodes its tasks need: "
      .. "give -N K for " .. set.gpus .. " on each of K nodes"
  end
  return set, note
end

-- whether an option's value asks for any GPU: --gres items (a GPU-memory slice, shard:8, and a bare
-- "gpu" count too), or the [type:]count items of --gpus and --gpus-per-*
local function asks_gpus(name, value)
  for part in string.gmatch(value or "", "[^,]+") do
    local item, n = part:gsub("^gres[:/]", ""), nil
    if name ~= "gres" then
      n = string.match(item, "(%d+)$")
    elseif string.match(item, "^gpu") or string.match(item, "^shard") then
      n = string.match(item, "^%a+$") and "1" or string.match(item, ":(%d+)$")
    end
    if tonumber(n or "0") > 0 then
      return true
    end
  end
  return false
end

-- what to tell the user of a --test-only that asks for GPUs, or nil. Slurm's answer cannot be
-- hivebatch's: the plugin keeps the GPU ask off the job until the controller places it, so the
-- will-run test (it calls the plugin as a submit does, and cannot be told apart) saw no GPUs and
-- named a node whose GPUs were all busy (recorded: tests/fixtures/slurm/test_only_gpu.txt)
function M.test_only_note(get)
  if get("test-only") ~= "set" then
    return nil
  end
  for _, name in ipairs({ "gres", "gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket" }) do
    if asks_gpus(name, get(name)) then
      return "Slurm's --test-only answer leaves out hivebatch, which places GPU jobs: "
        .. "'hsub --test-only' with the same options says when and where this job would start"
    end
  end
  return nil
end

-- the note the job_submit plugin takes off the front of a comment (SIGNAL_NOTE in job_submit.lua)
local SIGNAL_NOTE = "hivebatch:signal:"

-- a new job's comment with its --signal in front, or nil. Slurm 22.05 gives the job_submit plugin no
-- warn_signal, and shows it nowhere a controller could read, so a --signal given on the command line
-- was lost and a preemption notice sent SIGTERM instead. Here it is as Slurm keeps it, the command
-- line, SBATCH_SIGNAL and the script's #SBATCH lines merged ("0@0": none). The plugin puts the comment
-- back as the user wrote it (recorded: tests/fixtures/slurm/cli_filter_signal.txt).
function M.signal_comment(get, env)
  local signal = get("signal")
  if type(signal) ~= "string" or signal == "" or string.sub(signal, 1, 1) == "0" then
    return nil
  end
  if get("type") == "srun" and job_of_step(get, env) then
    return nil -- a step: its job has its own (sbatch and salloc make a new job wherever they run)
  end
  if get("test-only") == "set" then
    return nil -- no job comes of it, and sbatch -v would list the comment among the user's options
  end
  local own = get("comment")
  return SIGNAL_NOTE .. signal .. ((type(own) == "string" and own ~= "") and (" " .. own) or "")
end

function slurm_cli_setup_defaults(options, early_pass)
  return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, offset)
  local get = function(name)
    return options[name]
  end
  local checked, refusal = pcall(M.refusal, get, os.getenv)
  if checked and refusal ~= nil then
    io.stderr:write(string.format("srun: error: hivebatch: %s\n", refusal))
    return slurm.ERROR
  end
  local ok, set, note = pcall(M.rewrite, get, os.getenv)
  if ok and set ~= nil then
    if note ~= nil then
      io.stderr:write(string.format("%s: hivebatch: note: %s\n", tostring(options["type"]), note))
    end
    for name, value in pairs(set) do
      options[name] = value
    end
  end
  pcall(function()
    local comment = M.signal_comment(get, os.getenv)
    if comment ~= nil then
      options["comment"] = comment
    end
  end)
  pcall(function()
    local note = M.test_only_note(function(name)
      return options[name]
    end)
    if note ~= nil then
      -- worded as the plugin's notes, which sbatch and srun print as "<command>: hivebatch: note: …"
      io.stderr:write(string.format("%s: hivebatch: note: %s\n", tostring(options["type"]), note))
    end
  end)
  return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, job_id, step_id)
  return slurm.SUCCESS
end

HIVEBATCH_CLI_FILTER = M
