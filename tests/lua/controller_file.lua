-- What the specs of the plugin's checks against the controller's files (usage, node sizes) share:
--   local support = dofile("tests/lua/controller_file.lua")
--   local file = support.file()            -- a temporary file the controller would write
--   support.load_plugin({ usage_file = file.path, ... })   -- the lab's site table with those fields
local M = {}

function M.file()
  local path = os.tmpname()
  return {
    path = path,
    write = function(text)
      local fh = assert(io.open(path, "w"))
      fh:write(text)
      fh:close()
    end,
  }
end

-- a fresh fake slurm and the plugin loaded with the lab's site (4 nodes of 8 V100, VCs cv and nlp) and `fields`
function M.load_plugin(fields)
  dofile("tests/lua/fake_slurm.lua")
  local v100 = { name = "V100", max_per_node = 8, nodes = 4, total = 32, mem_mib = 32768 }
  _G.HIVEBATCH_SITE = {
    gpu_types = { v100 = v100 }, type_list = "v100", largest = v100,
    vcs = { cv = { gpus = 12 }, nlp = { gpus = 16 } }, vc_list = "cv, nlp",
    classes = { urgent = true, prior = true, normal = true, opportunistic = true },
    class_list = "urgent, prior, normal, opportunistic",
    default_class = "normal", opportunistic = "opportunistic", shard_mib = 1024, max_time_min = 525600,
    operator_uids = { [0] = true },
    user_limits = {},
    usage_max_age_s = 300,
  }
  for k, v in pairs(fields) do HIVEBATCH_SITE[k] = v end
  dofile("hivebatch/data/spread.lua") -- written into both, above their own logic
  dofile("hivebatch/data/job_submit.lua")
end

-- a GPU job as sbatch hands it to the plugin (fields recorded on the lab:
-- tests/fixtures/slurm/held_job_sizes.txt), with `fields` over it
function M.job(fields)
  local NO_VAL, NO_VAL16 = 4294967294, 65534
  local d = {
    user_name = "alice", default_account = "cv", priority = NO_VAL, min_nodes = NO_VAL, max_nodes = NO_VAL,
    num_tasks = NO_VAL, ntasks_per_node = NO_VAL16, ntasks_per_tres = NO_VAL16, sockets_per_node = NO_VAL16,
    cpus_per_task = NO_VAL16, pn_min_cpus = NO_VAL16, min_cpus = 1, time_limit = NO_VAL,
    tres_per_node = "gres:gpu:1",
  }
  for k, v in pairs(fields or {}) do d[k] = v end
  return d
end

return M
