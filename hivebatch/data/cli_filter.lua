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
--   * inside a job (SLURM_JOB_ID set), a step on one node: --gres=gpu[:TYPE]:N or --gpus-per-node=N
--     becomes --gpus=N (the job's GPUs are all of one type, the one it was placed by); a step over
--     all the job's K nodes asking all the GPUs of each (N = SLURM_GPUS_ON_NODE, or in salloc's shell
--     the job's own SLURM_GPUS_PER_NODE) becomes --gpus=N*K, which can only be taken N from each
--     node. This is how an srun inside `sbatch -N 2 --gpus-per-node=4` starts: it reads
--     SLURM_GPUS_PER_NODE=4 from the job's environment. A step's own --gpus or --gres beside that
--     read-back ask is what the step gets, as under plain Slurm;
--   * a new job (srun on a login node) with no node count, or one node: --gres=gpu:N or
--     --gpus-per-node=N becomes --gpus=N. hivebatch places it on one node, unless its tasks need
--     more (srun -n 32 on 16-CPU nodes): then, as Slurm spreads it, on as many as they need, with the
--     N GPUs split evenly over them. With exactly K nodes (-N K) it becomes --gpus=N*K, which the
--     plugin gives the job as N on each node, and the step takes them all, as under plain Slurm
--     (not for an Operator, whose job the plugin leaves to Slurm);
--   * a GPU model named to srun (--gres=gpu:v100:2, --gpus=v100:2, --gpus-per-task=v100:1), inside a
--     job or read from its environment, is dropped from the step's ask; a new job keeps it as a
--     --constraint, if it is one of the cluster's models (HIVEBATCH_GPU_MODELS, written above). A
--     step inside a job that names a model the cluster does not have is refused, as Slurm refuses a
--     step whose GPU type its job lacks (M.refusal).
--
-- sbatch's and srun's --test-only with a GPU ask is told that Slurm's answer is not hivebatch's, and
-- what gives hivebatch's (M.test_only_note).
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

-- whether the step or job srun is about to start lies on one node
function M.one_node(nodes, in_job, job_nodes)
  local lo, hi = node_range(nodes)
  if lo > 1 or hi > 1 then
    return false
  end
  if in_job and hi == 0 then
    return job_nodes == "1" -- a step spans the whole allocation unless told otherwise
  end
  return true
end

-- the number of nodes of a step that spans its whole job (nil: not inside a job, or fewer nodes)
function M.whole_job(nodes, in_job, job_nodes)
  local n = tonumber(job_nodes or "")
  if not in_job or n == nil then
    return nil
  end
  local lo, hi = node_range(nodes)
  if hi == 0 or (lo == n and hi == n) then
    return n
  end
  return nil
end

-- a new job's node count when srun was given exactly one (-N 2, -N 2-2); nil for a range or none
function M.exact_nodes(nodes)
  local lo, hi = node_range(nodes)
  if lo ~= hi or lo < 2 then
    return nil
  end
  return lo
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

-- the options to set (name -> value) for srun's GPU ask, or nil to leave it as given. A GPU model
-- named to srun, inside a job or for a new one, is dropped from the step's ask: it matches none of
-- the per-index pins. A new job keeps it as a --constraint, which the controller places by.
function M.rewrite(get, env)
  if get("type") ~= "srun" then
    return nil
  end
  local in_job = env("SLURM_JOB_ID") ~= nil
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
  local set = M.rewrite_counts(function(name)
    return untyped[name] or get(name)
  end, env)
  for _, name in ipairs({ "gres", "gpus", "gpus-per-node", "gpus-per-task" }) do
    if untyped[name] ~= nil then
      set = set or {}
      set[name] = set[name] or untyped[name]
    end
  end
  if constraint ~= nil then
    set.constraint = constraint
  end
  return set
end

-- inside a job, a step that names a GPU model the cluster does not have: Slurm refuses a step whose
-- GRES type its job lacks ("Step requested GRES (gpu:v100) not found in the job",
-- tests/fixtures/slurm/step_typed_gpus.txt), so it is refused in the plugin's words rather than run
-- on the job's GPUs once M.rewrite has dropped the model. nil: nothing to refuse (or no models list
-- above the filter, as from a hivebatch before it wrote one)
function M.refusal(get, env)
  local models = HIVEBATCH_GPU_MODELS
  if get("type") ~= "srun" or env("SLURM_JOB_ID") == nil or models == nil then
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

-- M.rewrite's per-node and per-step counts, with a step's types already dropped
function M.rewrite_counts(get, env)
  local in_job = env("SLURM_JOB_ID") ~= nil
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
  if typ ~= nil and not in_job then
    return nil -- a new job's GPU type is its owner's choice; the plugin says what to do
  end
  if count == 1 and typ == nil then
    return nil -- a one-GPU record holds it
  end
  local total = count
  if not M.one_node(get("nodes"), in_job, env("SLURM_JOB_NUM_NODES")) then
    local nodes = M.whole_job(get("nodes"), in_job, env("SLURM_JOB_NUM_NODES"))
    -- the job's GPUs on a node: slurmd tells a batch script; salloc's shell has its own ask
    local held = env("SLURM_GPUS_ON_NODE") or env("SLURM_GPUS_PER_NODE")
    if not in_job then
      -- the plugin pins no Operator's job, and Slurm would take --gpus=N*K unevenly from the nodes
      nodes, held = not M.operator(env) and M.exact_nodes(get("nodes")) or nil, tostring(count)
    end
    if nodes == nil or tostring(count) ~= held then
      return nil
    end
    -- every GPU of the job: each node gives all of its own. A new job on K nodes asks the total; the
    -- plugin gives a --gpus total on a fixed node count the same GPUs on every node
    total = count * nodes
  end
  local set = { gpus = tostring(math.max(total, step_total or 0)) }
  if field == "gres" then
    -- a zero count asks for none: it keeps srun's other GRES and takes the GPUs out of the per-node ask
    table.insert(others, 1, "gpu:0")
    set.gres = table.concat(others, ",")
  end
  if field == "gpus-per-node" or per_node_too then
    set["gpus-per-node"] = "0"
  end
  return set
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
  local ok, set = pcall(M.rewrite, get, os.getenv)
  if ok and set ~= nil then
    for name, value in pairs(set) do
      options[name] = value
    end
  end
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
