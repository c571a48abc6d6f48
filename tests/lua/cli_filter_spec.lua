-- Unit tests of hivebatch's cli_filter for srun, run with Lua 5.1 and busted:
--   lua5.1 /usr/bin/busted tests/lua
-- Option values are what srun 22.05 hands the filter (seen on the lab: --gres=gpu:2 reads
-- "gres:gpu:2", no -N reads nodes "1-0").

-- what `scontrol show job -o ID` says of a job (node count, GPUs per node), by id; nil: no answer
local JOBS = {}

-- what `sinfo -h -N -o '%N %c %m %f %G %P %B'` lists on the lab (4 nodes of 16 CPUs, 64000 MB, 8 V100),
-- by default its one partition (partition_max_cpus.txt: with small, MaxCPUsPerNode=8, over node3 and node4)
local function lab_sinfo(fixture)
  local lines = {}
  for line in io.lines("tests/fixtures/slurm/" .. (fixture or "sinfo_node_sizes.txt")) do
    if string.match(line, "^node%d ") then
      lines[#lines + 1] = line
    end
  end
  return table.concat(lines, "\n") .. "\n"
end
local SINFO = nil -- the text the stubbed sinfo gives (nil: Slurm does not answer)

local function load_filter()
  dofile("tests/lua/fake_slurm.lua")
  _G.HIVEBATCH_GPU_MODELS = { v100 = true } -- as hadmin slurm-config writes them above the filter
  _G.HIVEBATCH_OPERATORS = { root = true, hbctl = true }
  dofile("hivebatch/data/spread.lua") -- written into both, above their own logic
  dofile("hivebatch/data/cli_filter.lua")
  HIVEBATCH_CLI_FILTER.job_figures = function(id)
    local j = JOBS[id]
    if j == nil then
      return nil
    end
    return j[1], j[2]
  end
  local parse = HIVEBATCH_CLI_FILTER.parse_node_sizes
  HIVEBATCH_CLI_FILTER.node_sizes = function(model, partition)
    return SINFO and parse(SINFO, model, partition)
  end
  return HIVEBATCH_CLI_FILTER
end

-- M.rewrite for srun options and an environment, both plain tables
local function rewrite(options, env)
  local M = load_filter()
  options.type = options.type or "srun"
  options.nodes = options.nodes or "1-0"
  return M.rewrite(function(name) return options[name] end, function(name) return (env or {})[name] end)
end

local IN_JOB = { SLURM_JOB_ID = "42", SLURM_JOB_NUM_NODES = "1" }

describe("srun's own GPU ask", function()
  it("asks a new job on one node for its GPUs per step", function()
    -- no node count is set: a job whose tasks need more nodes than one is spread as Slurm does
    assert.are.same({ gres = "gpu:0", gpus = "2" }, rewrite({ gres = "gres:gpu:2" }))
    assert.are.same({ ["gpus-per-node"] = "0", gpus = "2" }, rewrite({ ["gpus-per-node"] = "2" }))
    assert.are.same({ gres = "gpu:0", gpus = "4" }, rewrite({ gres = "gres:gpu:4", nodes = "1" }))
  end)

  it("runs a new job's node range on its fewest nodes, as the plugin runs sbatch's", function()
    -- the filter left `srun -N 1-2 --gres=gpu:2` to the plugin, which refused it (a per-node count on
    -- per-GPU pins); plain Slurm took both nodes of an idle lab (tests/fixtures/slurm/node_range.txt)
    local one, note = rewrite({ gres = "gres:gpu:2", nodes = "1-2" })
    assert.are.same({ gres = "gpu:0", gpus = "2", nodes = "1" }, one)
    assert.are.equal("-N 1-2 runs on 1 nodes, the fewest it allows: a job gets one node count here", note)
    local two
    two, note = rewrite({ gres = "gres:gpu:2", nodes = "2-3" })
    assert.are.same({ gres = "gpu:0", ["gpus-per-task"] = "2", ["ntasks-per-node"] = "1", nodes = "2" }, two)
    assert.are.equal("-N 2-3 runs on 2 nodes, the fewest it allows: a job gets one node count here", note)
    assert.is_nil(select(2, rewrite({ gres = "gres:gpu:2", nodes = "2" })))
  end)

  it("asks several tasks without a node count for the nodes they need, with N GPUs on each", function()
    -- plain Slurm gave `srun -n 32 --gres=gpu:2` 2 GPUs on each of the nodes its tasks took; the filter
    -- asked 2 in all, one on each of two nodes (tests/fixtures/slurm/srun_new_job_nodes.txt)
    SINFO = lab_sinfo()
    finally(function() SINFO = nil end)
    local set, note = rewrite({ gres = "gres:gpu:2", ntasks = "32", nodes = "1-0" }) -- srun's unset -N reads "1-0"
    assert.are.same({ gres = "gpu:0", gpus = "4", nodes = "2" }, set)
    assert.is_nil(note)
    -- by --ntasks-per-node, by memory per CPU, by CPUs per task; a per-node --gpus-per-node alike
    assert.are.same({ gres = "gpu:0", gpus = "8", nodes = "4" },
                    (rewrite({ gres = "gres:gpu:2", ntasks = "16", ["ntasks-per-node"] = "4" })))
    assert.are.same({ gres = "gpu:0", gpus = "4", nodes = "2" },
                    (rewrite({ gres = "gres:gpu:2", ntasks = "16", ["mem-per-cpu"] = "5000" })))
    assert.are.same({ gres = "gpu:0", gpus = "6", nodes = "3" },
                    (rewrite({ gres = "gres:gpu:2", ntasks = "26", ["mem-per-cpu"] = "5G" })))
    assert.are.same({ ["gpus-per-node"] = "0", gpus = "6", nodes = "2" },
                    (rewrite({ ["gpus-per-node"] = "3", ntasks = "8", ["cpus-per-task"] = "4" })))
    -- one task per node: N per task, as for -N K
    assert.are.same({ gres = "gpu:0", ["gpus-per-task"] = "2", ["ntasks-per-node"] = "1", nodes = "2" },
                    (rewrite({ gres = "gres:gpu:2", ntasks = "2", ["cpus-per-task"] = "16" })))
    -- tasks one node holds stay on one; a task larger than any node is left to the plugin's refusal
    assert.are.same({ gres = "gpu:0", gpus = "2" }, (rewrite({ gres = "gres:gpu:2", ntasks = "16" })))
    assert.are.same({ gres = "gpu:0", gpus = "2" },
                    (rewrite({ gres = "gres:gpu:2", ntasks = "2", ["cpus-per-task"] = "32" })))
    -- a model named to srun counts the nodes of that model; --exclusive with more tasks than nodes is
    -- left to the plugin, as on exactly K nodes
    local typed = rewrite({ gres = "gres:gpu:v100:2", ntasks = "32" })
    assert.are.same({ gres = "gpu:0", gpus = "4", nodes = "2", constraint = "v100" }, typed)
    assert.is_nil(rewrite({ gres = "gres:gpu:2", ntasks = "32", exclusive = "exclusive" }))
  end)

  it("sizes nodes by the GPU nodes sinfo lists, of the model asked", function()
    local M = load_filter()
    local text = "cpu1 64 256000 (null) (null) gpu* UNLIMITED 1-infinite\n"
      .. "node1 16 64000 v100 gpu:g0:1(S:0),gpu:g1:1(S:0) gpu* UNLIMITED 1-infinite\n"
      .. "node9 32 128000 a100,bigmem gpu:g0:1(S:0),shard:g0:32(S:0) gpu* UNLIMITED 1-infinite\n"
      .. "node9 32 128000 a100,bigmem gpu:g0:1(S:0),shard:g0:32(S:0) big UNLIMITED 1-4\n"
    assert.are.same({ cpus = 32, mem = 128000, fewest = 1, most = 0 }, M.parse_node_sizes(text))
    assert.are.same({ cpus = 16, mem = 64000, fewest = 1, most = 0 }, M.parse_node_sizes(text, "v100"))
    assert.are.same({ cpus = 32, mem = 128000, fewest = 1, most = 0 }, M.parse_node_sizes(text, "a100"))
    assert.is_nil(M.parse_node_sizes(text, "h100"))
    assert.is_nil(M.parse_node_sizes(""))
    -- the partition asked: its own nodes only, each with the CPUs its MaxCPUsPerNode lets a job use
    assert.are.same({ cpus = 32, mem = 128000, fewest = 1, most = 4 }, M.parse_node_sizes(text, nil, "big"))
    assert.is_nil(M.parse_node_sizes(text, "v100", "big"))
    local lab = lab_sinfo("partition_max_cpus.txt")
    assert.are.same({ cpus = 16, mem = 64000, fewest = 1, most = 0 }, M.parse_node_sizes(lab))
    assert.are.same({ cpus = 8, mem = 64000, fewest = 1, most = 0 }, M.parse_node_sizes(lab, nil, "small"))
    assert.are.same({ cpus = 16, mem = 64000, fewest = 1, most = 0 }, M.parse_node_sizes(lab, nil, "small,gpu"))
    assert.is_nil(M.parse_node_sizes(lab, nil, "debug"))
    -- MaxNodes=1 reads "1", MinNodes=2 "2-infinite" (partition_node_limits.txt); the loosest counts
    lab = lab_sinfo("partition_node_limits.txt")
    assert.are.same({ cpus = 16, mem = 64000, fewest = 1, most = 1 }, M.parse_node_sizes(lab, nil, "one"))
    assert.are.same({ cpus = 16, mem = 64000, fewest = 2, most = 0 }, M.parse_node_sizes(lab, nil, "two"))
    assert.are.same({ cpus = 16, mem = 64000, fewest = 1, most = 0 }, M.parse_node_sizes(lab, nil, "one,two"))
  end)

  it("counts several tasks' nodes within their partition's MinNodes and MaxNodes", function()
    -- plain Slurm ran a job on two nodes in MinNodes=2, and refused at submit tasks needing two nodes
    -- in MaxNodes=1 (tests/fixtures/slurm/partition_node_limits.txt)
    SINFO = lab_sinfo("partition_node_limits.txt")
    finally(function() SINFO = nil end)
    assert.are.same({ gres = "gpu:0", gpus = "4", nodes = "2" },
                    (rewrite({ gres = "gres:gpu:2", ntasks = "4", partition = "two" })))
    assert.are.same({ gres = "gpu:0", gpus = "2" }, (rewrite({ gres = "gres:gpu:2", ntasks = "16", partition = "one" })))
    -- one task: a GPU ask per node on each of MinNodes nodes, as for -N 2; a range from MinNodes
    assert.are.same({ gres = "gpu:0", ["gpus-per-task"] = "2", ["ntasks-per-node"] = "1", nodes = "2" },
                    (rewrite({ gres = "gres:gpu:2", partition = "two" })))
    assert.are.same({ gres = "gpu:0", ["gpus-per-task"] = "2", ["ntasks-per-node"] = "1", nodes = "2" },
                    (rewrite({ gres = "gres:gpu:2", partition = "two", nodes = "1-3" })))
    assert.are.same({ gres = "gpu:0", gpus = "2" }, (rewrite({ gres = "gres:gpu:2", partition = "one" })))
    -- beyond it, one node's total, which the plugin refuses, saying why (no note of a spread)
    local set, note = rewrite({ gres = "gres:gpu:2", ntasks = "32", partition = "one" })
    assert.are.same({ gres = "gpu:0", gpus = "2" }, set)
    assert.is_nil(note)
  end)

  it("counts the nodes of several tasks by the CPUs their partition lets a job use", function()
    -- plain Slurm ran `srun -p small -n 16 --gres=gpu:2` on node3 and node4, 8 tasks and GPUs 0,1 on each,
    -- MaxCPUsPerNode=8 (tests/fixtures/slurm/partition_max_cpus.txt)
    SINFO = lab_sinfo("partition_max_cpus.txt")
    finally(function() SINFO = nil end)
    assert.are.same({ gres = "gpu:0", gpus = "4", nodes = "2" },
                    (rewrite({ gres = "gres:gpu:2", ntasks = "16", partition = "small" })))
    assert.are.same({ gres = "gpu:0", gpus = "2" }, (rewrite({ gres = "gres:gpu:2", ntasks = "16" })))
    -- overcommitted, Slurm allocates as if one task ran on each node: one node (overcommit.txt)
    assert.are.same({ gres = "gpu:0", gpus = "2" },
                    (rewrite({ gres = "gres:gpu:2", ntasks = "16", partition = "small", overcommit = "set" })))
  end)

  it("says when Slurm did not list its nodes and a per-node ask of several tasks became a total", function()
    SINFO = nil
    local set, note = rewrite({ gres = "gres:gpu:2", ntasks = "32", nodes = "1-0" })
    assert.are.same({ gres = "gpu:0", gpus = "2" }, set)
    assert.are.equal("the per-node GPU ask counts as 2 GPUs in all, spread over the nodes its tasks need: "
                     .. "give -N K for 2 on each of K nodes", note)
    -- one task, a node count, or a step: nothing to say
    assert.is_nil(select(2, rewrite({ gres = "gres:gpu:2", nodes = "1-0" })))
    assert.is_nil(select(2, rewrite({ gres = "gres:gpu:2", ntasks = "32", nodes = "1" })))
    assert.is_nil(select(2, rewrite({ gres = "gres:gpu:2", ntasks = "32" }, { SLURM_JOB_ID = "42", SLURM_JOB_NUM_NODES = "1" })))
    -- inside a job a range is the step's, over nodes the job holds already: left as it was
    assert.is_nil(rewrite({ gres = "gres:gpu:2", nodes = "1-2" }, { SLURM_JOB_ID = "42", SLURM_JOB_NUM_NODES = "2" }))
  end)

  it("asks a new job on exactly K nodes for N GPUs per task, one task on each node", function()
    -- plain Slurm ran `srun -N 2 --gres=gpu:2` with 2 GPUs on each node
    -- (tests/fixtures/slurm/srun_new_job_nodes.txt); a per-task count stays with whole tasks
    local two = { gres = "gpu:0", ["gpus-per-task"] = "2", ["ntasks-per-node"] = "1" }
    assert.are.same(two, rewrite({ gres = "gres:gpu:2", nodes = "2", ntasks = "1", ["ntasks-per-node"] = "-2" }))
    assert.are.same({ gres = "gpu:0", ["gpus-per-task"] = "3", ["ntasks-per-node"] = "1" },
                    rewrite({ gres = "gres:gpu:3", nodes = "2-2", ntasks = "2", ["ntasks-per-node"] = "1" }))
    assert.are.same({ ["gpus-per-node"] = "0", ["gpus-per-task"] = "2", ["ntasks-per-node"] = "1" },
                    rewrite({ ["gpus-per-node"] = "2", nodes = "4" }))
    -- whole nodes as well: Slurm took --gpus=4 from two --exclusive nodes as 3 + 1
    assert.are.same(two, rewrite({ gres = "gres:gpu:2", nodes = "2", exclusive = "exclusive" }))
    assert.are.same({ gres = "gpu:0", ["gpus-per-task"] = "2", ["ntasks-per-node"] = "1", constraint = "v100" },
                    rewrite({ gres = "gres:gpu:v100:2", nodes = "2" }, { USER = "bob" }))
    -- the K nodes -w names, as Slurm takes them (before, counted as one node: 1 GPU on each)
    assert.are.same(two, rewrite({ gres = "gres:gpu:2", nodelist = "node1,node2" }))
    assert.are.same(two, rewrite({ gres = "gres:gpu:2", nodelist = "node[1-3]" }))
    assert.are.same({ gres = "gpu:0", gpus = "2" }, rewrite({ gres = "gres:gpu:2", nodelist = "node3" }))
    assert.is_nil(rewrite({ gres = "gres:gpu:2", nodelist = "./hosts" }))           -- a file srun reads later
    assert.is_nil(rewrite({ gres = "gres:gpu:2", nodes = "1", nodelist = "node[1,2]" }))  -- Slurm's to refuse
  end)

  it("asks a new job with more tasks than nodes for the total, which the plugin gives evenly", function()
    assert.are.same({ gres = "gpu:0", gpus = "4" },
                    rewrite({ gres = "gres:gpu:2", nodes = "2", ntasks = "4", ["ntasks-per-node"] = "-2" }))
    assert.are.same({ gres = "gpu:0", gpus = "4" },
                    rewrite({ gres = "gres:gpu:2", nodes = "2", ntasks = "1", ["ntasks-per-node"] = "2" }))
    -- on whole nodes a total is taken unevenly: the plugin says what starts
    assert.is_nil(rewrite({ gres = "gres:gpu:2", nodes = "2", ntasks = "4", exclusive = "exclusive" }))
    assert.is_nil(rewrite({ gres = "gres:gpu:2", nodes = "2", ["gpus-per-task"] = "1" }))
  end)

  it("leaves an Operator's new job as given: the plugin pins none of theirs", function()
    assert.is_nil(rewrite({ gres = "gres:gpu:2", nodes = "2" }, { USER = "hbctl" }))
    assert.is_nil(rewrite({ gres = "gres:gpu:2", nodes = "2" }, { LOGNAME = "root" }))
    assert.is_nil(rewrite({ gres = "gres:gpu:2" }, { USER = "hbctl" }))
  end)

  it("reads srun --jobid as a step of that job, whose size only the job's own environment says", function()
    -- plain Slurm ran `srun --jobid=J --gres=gpu:2` from a login node on both nodes of a 2-node
    -- allocation with 2 GPUs each; read as a new job on one node it asked --gpus=2 and got 1 + 1
    -- its step takes one task on each of J's nodes: told one task per node, it took one node
    local per_task = { gres = "gpu:0", ["gpus-per-task"] = "2" }
    assert.are.same(per_task, rewrite({ gres = "gres:gpu:2", jobid = "77" }))
    assert.are.same(per_task, rewrite({ gres = "gres:gpu:v100:2", jobid = "77" }))  -- no constraint: a step
    assert.are.same({ gres = "gpu:0", gpus = "2" }, rewrite({ gres = "gres:gpu:2", jobid = "77", nodes = "1" }))
    assert.is_nil(rewrite({ gres = "gres:gpu:2", jobid = "77", ntasks = "4" }))    -- a total needs the size
    -- from inside another job, whose environment is not the target's
    local other = { SLURM_JOB_ID = "42", SLURM_JOB_NUM_NODES = "2", SLURM_GPUS_ON_NODE = "2" }
    assert.are.same(per_task, rewrite({ gres = "gres:gpu:2", jobid = "77", nodes = "2" }, other))
    assert.is_nil(rewrite({ gres = "gres:gpu:2", jobid = "77", nodes = "2", ntasks = "4" }, other))
    assert.are.same({ gres = "gpu:0", gpus = "4" }, rewrite({ gres = "gres:gpu:2", jobid = "42", ntasks = "4" }, other))
    assert.are.same(per_task, rewrite({ gres = "gres:gpu:2", jobid = "77" }, { USER = "hbctl" }))  -- a step
  end)

  it("asks Slurm how many GPUs a job holds on a node where the step's environment does not say", function()
    -- salloc -N 2 --ntasks-per-node=2 --gres=gpu:2: srun --gres=gpu:2 ran 2 tasks on each node with
    -- both GPUs under plain Slurm, and was refused on per-GPU pins (srun_new_job_nodes.txt)
    local shell = { SLURM_JOB_ID = "42", SLURM_JOB_NUM_NODES = "2" }
    JOBS["42"] = { 2, 2 }
    assert.are.same({ gres = "gpu:0", gpus = "4" },
                    rewrite({ gres = "gres:gpu:2", ntasks = "4", ["ntasks-per-node"] = "2" }, shell))
    JOBS["42"] = { 2, 8 } -- whole nodes: a total would be taken unevenly
    assert.is_nil(rewrite({ gres = "gres:gpu:2", ntasks = "4", ["ntasks-per-node"] = "2" }, shell))
    JOBS["42"] = nil -- no answer
    assert.is_nil(rewrite({ gres = "gres:gpu:2", ntasks = "4", ["ntasks-per-node"] = "2" }, shell))
    -- srun --jobid from outside: the job's node count comes from Slurm too
    JOBS["77"] = { 3, 2 }
    assert.are.same({ gres = "gpu:0", gpus = "6" }, rewrite({ gres = "gres:gpu:2", jobid = "77", ntasks = "6" }))
    assert.is_nil(rewrite({ gres = "gres:gpu:2", jobid = "77", nodes = "2", ntasks = "4" }))  -- not all of them
    JOBS["77"] = nil
  end)

  it("asks Slurm about a job id of digits only", function()
    local M = load_filter()
    dofile("hivebatch/data/spread.lua") -- written into both, above their own logic
    dofile("hivebatch/data/cli_filter.lua") -- the real job_figures, not the stub
    M = HIVEBATCH_CLI_FILTER
    local saved, ran = io.popen, {}
    io.popen = function(cmd)
      ran[#ran + 1] = cmd
      return { read = function() return "JobId=42 NumNodes=2 TresPerNode=gres:gpu:g0:1,gres:gpu:g1:1 X=1" end,
               close = function() end }
    end
    local nodes, per_node = M.job_figures("42")
    local bad = { M.job_figures("42; rm -rf ~"), M.job_figures("42_1"), M.job_figures(nil) }
    io.popen = saved
    assert.are.same({ 2, 2 }, { nodes, per_node })
    assert.are.same({}, bad)
    assert.are.same({ "scontrol show job -o 42 2>/dev/null" }, ran)
  end)

  it("asks sinfo for the GPU nodes' sizes with a fixed command", function()
    load_filter()
    dofile("hivebatch/data/spread.lua")
    dofile("hivebatch/data/cli_filter.lua") -- the real node_sizes, not the stub
    local M = HIVEBATCH_CLI_FILTER
    local saved, ran = io.popen, {}
    io.popen = function(cmd)
      ran[#ran + 1] = cmd
      return { read = function() return lab_sinfo() end, close = function() end }
    end
    local sizes, none = M.node_sizes(nil), M.node_sizes("a100")
    io.popen = saved
    assert.are.same({ cpus = 16, mem = 64000, fewest = 1, most = 0 }, sizes)
    assert.is_nil(none)
    assert.are.same({ "sinfo -h -N -o '%N %c %m %f %G %P %B %s' 2>/dev/null" }, { ran[1] })
  end)

  it("counts the hosts of a --nodelist as Slurm's hostlists name them", function()
    local M = load_filter()
    assert.are.equal(0, M.count_hosts(nil))
    assert.are.equal(1, M.count_hosts("node1"))
    assert.are.equal(5, M.count_hosts("node[1-3,5],gpu7"))
    assert.are.equal(4, M.count_hosts("r[1-2]n[1-2]"))
    assert.is_nil(M.count_hosts("/home/u/hosts"))
  end)

  it("reads a step's -w as its nodes, unless it has a node count (srun reads SLURM_NNODES as -N)", function()
    -- plain Slurm ran `srun -w node1` inside a 2-node batch job on both nodes (SLURM_NNODES=2), and
    -- on node1 alone without SLURM_NNODES
    local batch = { SLURM_JOB_ID = "42", SLURM_JOB_NUM_NODES = "2", SLURM_GPUS_ON_NODE = "2" }
    assert.are.same({ gres = "gpu:0", gpus = "2" }, rewrite({ gres = "gres:gpu:2", nodelist = "node2" }, batch))
    assert.are.same({ gres = "gpu:0", gpus = "4" },
                    rewrite({ gres = "gres:gpu:2", nodes = "2", nodelist = "node2" }, batch))
    assert.are.same({ gres = "gpu:0", gpus = "4" }, rewrite({ gres = "gres:gpu:2", nodelist = "node[1-2]" }, batch))
    assert.is_nil(rewrite({ gres = "gres:gpu:2", nodes = "1", nodelist = "node[1-2]" }, batch))
  end)

  it("asks a step over all of a job's nodes for every GPU of each as one total", function()
    -- an srun inside `sbatch -N 2 --gpus-per-node=4` reads SLURM_GPUS_PER_NODE=4 back as its ask
    local batch = { SLURM_JOB_ID = "42", SLURM_JOB_NUM_NODES = "2", SLURM_GPUS_ON_NODE = "4" }
    assert.are.same({ ["gpus-per-node"] = "0", gpus = "8" }, rewrite({ ["gpus-per-node"] = "4" }, batch))
    assert.are.same({ gres = "gpu:0", gpus = "8" }, rewrite({ gres = "gres:gpu:4", nodes = "2" }, batch))
    -- salloc's shell: no SLURM_GPUS_ON_NODE, the job's own ask instead
    local shell = { SLURM_JOB_ID = "42", SLURM_JOB_NUM_NODES = "2", SLURM_GPUS_PER_NODE = "2" }
    assert.are.same({ ["gpus-per-node"] = "0", gpus = "4" }, rewrite({ ["gpus-per-node"] = "2" }, shell))
    assert.is_nil(rewrite({ ["gpus-per-node"] = "4", nodes = "1-2" }, batch))  -- maybe not every node
    -- with more tasks than nodes, only where each node holds just the step's ask
    assert.are.same({ gres = "gpu:0", gpus = "8" }, rewrite({ gres = "gres:gpu:4", ntasks = "4" }, batch))
    assert.is_nil(rewrite({ gres = "gres:gpu:2", ntasks = "4" }, batch))
  end)

  it("asks a step of one task per node for N GPUs per task where the job's GPUs per node are unknown", function()
    -- salloc -N 2 --gres=gpu:2: its shell has no SLURM_GPUS_ON_NODE, and plain Slurm ran
    -- `srun --gres=gpu:2` there with 2 GPUs on each node (tests/fixtures/slurm/srun_new_job_nodes.txt)
    local shell = { SLURM_JOB_ID = "42", SLURM_JOB_NUM_NODES = "2" }
    assert.are.same({ ["gpus-per-node"] = "0", ["gpus-per-task"] = "4" }, rewrite({ ["gpus-per-node"] = "4" }, shell))
    assert.are.same({ gres = "gpu:0", ["gpus-per-task"] = "2" }, rewrite({ gres = "gres:gpu:2", nodes = "2" }, shell))
    -- or fewer than each node holds (a batch job of 4 per node, or whole nodes)
    local batch = { SLURM_JOB_ID = "42", SLURM_JOB_NUM_NODES = "2", SLURM_GPUS_ON_NODE = "4" }
    assert.are.same({ gres = "gpu:0", ["gpus-per-task"] = "2" }, rewrite({ gres = "gres:gpu:2" }, batch))
    assert.is_nil(rewrite({ gres = "gres:gpu:2", ["ntasks-per-node"] = "2" }, shell))
  end)

  it("joins a step's own --gpus to the per-node ask it read from the job's environment", function()
    -- srun -N 1 -n 1 --gpus=1 inside sbatch -N 2 --gpus-per-node=2 (SLURM_GPUS_PER_NODE=2)
    local batch = { SLURM_JOB_ID = "42", SLURM_JOB_NUM_NODES = "2", SLURM_GPUS_ON_NODE = "2" }
    assert.are.same({ ["gpus-per-node"] = "0", gpus = "2" },
                    rewrite({ gpus = "1", ["gpus-per-node"] = "2", nodes = "1" }, batch))
    assert.are.same({ ["gpus-per-node"] = "0", gpus = "4" }, rewrite({ gpus = "v100:1", ["gpus-per-node"] = "2" }, batch))
    assert.is_nil(rewrite({ gpus = "1", ["gpus-per-node"] = "1" }, batch))  -- a one-GPU record holds it
  end)

  it("goes by a step's --gres beside the per-node ask it read from the job's environment", function()
    -- srun --gres=gpu:2 inside sbatch --gpus-per-node=2 (SLURM_GPUS_PER_NODE=2)
    assert.are.same({ gres = "gpu:0", ["gpus-per-node"] = "0", gpus = "2" },
                    rewrite({ gres = "gres:gpu:2", ["gpus-per-node"] = "2" }, IN_JOB))
  end)

  it("keeps srun's other GRES", function()
    assert.are.same({ gres = "gpu:0,tmpdisk:10", gpus = "2" },
                    rewrite({ gres = "gres:gpu:2,gres:tmpdisk:10" }))
  end)

  it("drops the type of a step's ask inside a job, whose GPUs are of one type", function()
    assert.are.same({ gres = "gpu:0", gpus = "1" }, rewrite({ gres = "gres:gpu:v100:1" }, IN_JOB))
    assert.are.same({ gres = "gpu:0", gpus = "2" }, rewrite({ gres = "gres:gpu:2" }, IN_JOB))
  end)

  it("drops the type a step reads from its job's environment, which no per-index GPU record has", function()
    -- sbatch --gpus=v100:2, --gpus-per-node=v100:2, --gpus-per-task=v100:1 -n 2: a plain `srun` inside
    -- reads SLURM_GPUS / SLURM_GPUS_PER_NODE / SLURM_GPUS_PER_TASK (tests/fixtures/slurm/step_typed_gpus.txt)
    assert.are.same({ gpus = "2" }, rewrite({ gpus = "v100:2" }, IN_JOB))
    assert.are.same({ ["gpus-per-node"] = "0", gpus = "2" }, rewrite({ ["gpus-per-node"] = "v100:2" }, IN_JOB))
    assert.are.same({ ["gpus-per-node"] = "1" }, rewrite({ ["gpus-per-node"] = "v100:1" }, IN_JOB))
    assert.are.same({ ["gpus-per-task"] = "1" }, rewrite({ ["gpus-per-task"] = "v100:1" }, IN_JOB))
    local two = { SLURM_JOB_ID = "42", SLURM_JOB_NUM_NODES = "2", SLURM_GPUS_ON_NODE = "4" }
    assert.are.same({ ["gpus-per-node"] = "0", gpus = "8" }, rewrite({ ["gpus-per-node"] = "v100:4" }, two))
  end)

  it("asks a new job for its GPU model as the constraint that picks its nodes, and its step for a count", function()
    -- `srun --gres=gpu:v100:1 python x.py` on a login node: the model stays the owner's choice of
    -- nodes (hivebatch's slurm.conf gives each node its model as a feature); the step asks a count
    assert.are.same({ gres = "gpu:1", constraint = "v100" }, rewrite({ gres = "gres:gpu:v100:1" }))
    assert.are.same({ gres = "gpu:0", gpus = "2", constraint = "v100" }, rewrite({ gres = "gres:gpu:v100:2" }))
    assert.are.same({ gpus = "2", constraint = "v100" }, rewrite({ gpus = "V100:2" }))
    assert.are.same({ ["gpus-per-task"] = "1", constraint = "v100" }, rewrite({ ["gpus-per-task"] = "v100:1" }))
    assert.are.same({ ["gpus-per-node"] = "0", gpus = "2", constraint = "ib&v100" },
                    rewrite({ ["gpus-per-node"] = "v100:2", constraint = "ib" }))
    assert.are.same({ gres = "gpu:0,nic:1", gpus = "2", constraint = "v100" }, rewrite({ gres = "gres:gpu:v100:2,gres:nic:1" }))
    -- what only Slurm reads, or two models, is left to the plugin, which says what to do
    assert.is_nil(rewrite({ gpus = "v100:2", constraint = "ib|eth" }))
    assert.is_nil(rewrite({ gpus = "v100:2", constraint = "[rack1|rack2]" }))
    assert.is_nil(rewrite({ gpus = "v100:2", ["gpus-per-task"] = "a100:1" }))
    assert.is_nil(rewrite({ gres = "gres:gpu:v100:1,gres:gpu:a100:1" }))
    assert.is_nil(rewrite({ gpus = "a100:1" }))  -- no such model here: the plugin names those there are
  end)

  it("refuses a step inside a job that names a GPU model the cluster does not have", function()
    -- Slurm refuses a step whose GPU type its job lacks (tests/fixtures/slurm/step_typed_gpus.txt);
    -- with the model dropped, `srun --gpus=a100:1` inside a v100 job ran on the job's GPUs
    local M = load_filter()
    local function refusal(options, env)
      options.type = options.type or "srun"
      return M.refusal(function(name) return options[name] end, function(name) return (env or {})[name] end)
    end
    assert.are.equal("GPU type 'a100' in --gpus is not on this cluster (types: v100)",
                     refusal({ gpus = "a100:1" }, IN_JOB))
    assert.are.equal("GPU type 'a100' in --gres is not on this cluster (types: v100)",
                     refusal({ gres = "gres:gpu:a100:2" }, IN_JOB))
    assert.are.equal("GPU type 'h100' in --gpus-per-task is not on this cluster (types: v100)",
                     refusal({ ["gpus-per-task"] = "h100:1" }, IN_JOB))
    assert.is_nil(refusal({ gpus = "V100:1" }, IN_JOB))        -- the cluster's own model, any case
    assert.is_nil(refusal({ gres = "gres:gpu:2" }, IN_JOB))     -- no model named
    assert.is_nil(refusal({ gpus = "a100:1" }))                 -- a new job: the plugin says it
    assert.is_nil(refusal({ gpus = "a100:1", type = "sbatch" }, IN_JOB))
    _G.HIVEBATCH_GPU_MODELS = nil                                -- a filter written before the models list
    assert.is_nil(refusal({ gpus = "a100:1" }, IN_JOB))
  end)

  it("fails srun with the refusal on one line", function()
    load_filter()
    local options = { type = "srun", gpus = "a100:1", nodes = "1-0" }
    local saved_getenv, saved_stderr = os.getenv, io.stderr
    local written = {}
    os.getenv = function(name) return IN_JOB[name] end
    io.stderr = { write = function(_, text) written[#written + 1] = text end }
    local rc = slurm_cli_pre_submit(options, 0)
    os.getenv, io.stderr = saved_getenv, saved_stderr
    assert.are.equal(slurm.ERROR, rc)
    assert.are.same({ "srun: error: hivebatch: GPU type 'a100' in --gpus is not on this cluster (types: v100)\n" },
                    written)
  end)

  it("leaves what starts as it is, and what it cannot rewrite to the plugin", function()
    assert.is_nil(rewrite({ gres = "gres:gpu:1" }))                        -- a one-GPU record holds it
    assert.is_nil(rewrite({ gpus = "2" }))                                 -- per step already
    assert.is_nil(rewrite({ gpus = "2" }, IN_JOB))
    assert.is_nil(rewrite({ gpus = "1", ["gpus-per-node"] = "2" }))        -- a new job's own contradiction
    assert.is_nil(rewrite({ gres = "gres:gpu:2", ntasks = "4" }, { SLURM_JOB_ID = "42", SLURM_JOB_NUM_NODES = "2",
                                                      SLURM_GPUS_ON_NODE = "4" }))  -- fewer than each node holds
    assert.is_nil(rewrite({ gres = "gres:gpu:1", ["gpus-per-node"] = "2" }, IN_JOB)) -- the --gres is one GPU
    assert.is_nil(rewrite({ gres = "gres:gpu:0" }))
    assert.is_nil(rewrite({ gres = "gres:tmpdisk:10" }))
    assert.is_nil(rewrite({ gres = "gres:gpu:2", type = "sbatch" }))
    assert.is_nil(rewrite({ gres = "gres:gpu:2", type = "salloc" }))
  end)

  it("reads a step on one node of a larger job as one node", function()
    assert.are.same({ gres = "gpu:0", gpus = "2" },
                    rewrite({ gres = "gres:gpu:2", nodes = "1" }, { SLURM_JOB_ID = "42", SLURM_JOB_NUM_NODES = "2" }))
  end)

  it("sets what it rewrites on srun's options and never fails srun", function()
    load_filter()
    local set = {}
    local options = setmetatable({}, {
      __index = function(_, k) return ({ type = "srun", gres = "gres:gpu:2", nodes = "1-0" })[k] end,
      __newindex = function(_, k, v) set[k] = v end,
    })
    assert.are.equal(slurm.SUCCESS, slurm_cli_pre_submit(options, 0))
    assert.are.same({ gres = "gpu:0", gpus = "2" }, set)
    local broken = setmetatable({}, { __index = function() error("no such option") end })
    assert.are.equal(slurm.SUCCESS, slurm_cli_pre_submit(broken, 0))
  end)
end)

describe("a --test-only that asks for GPUs", function()
  local function note(options)
    local M = load_filter()
    return M.test_only_note(function(name) return options[name] end)
  end

  it("is told that Slurm's answer is not hivebatch's, and what gives hivebatch's", function()
    -- option values as sbatch and srun 22.05 hand them to the filter (tests/fixtures/slurm/test_only_gpu.txt)
    for _, asked in ipairs({ { gres = "gres:gpu:2" }, { gpus = "1" }, { ["gpus-per-node"] = "v100:2" },
                             { ["gpus-per-task"] = "1" }, { gres = "gres:shard:8" }, { gres = "gres:gpu" } }) do
      asked["test-only"] = "set"
      assert.truthy(string.find(note(asked) or "", "'hsub --test-only' with the same options", 1, true), asked)
    end
  end)

  it("is not told without --test-only or without GPUs", function()
    assert.is_nil(note({ ["test-only"] = "unset", gres = "gres:gpu:2" }))
    assert.is_nil(note({ ["test-only"] = "set" }))
    assert.is_nil(note({ ["test-only"] = "set", gres = "gres:gpu:0" }))
    assert.is_nil(note({ ["test-only"] = "set", gpus = "0", gres = "gres:mps:100" }))
  end)

  it("is written on stderr as sbatch's own notes are, and never fails the command", function()
    load_filter()
    local written = {}
    local real = io.stderr
    io.stderr = { write = function(_, text) table.insert(written, text) end }
    local options = { type = "sbatch", ["test-only"] = "set", gres = "gres:gpu:2" }
    local ok, rc = pcall(slurm_cli_pre_submit, options, 0)
    io.stderr = real
    assert.is_true(ok)
    assert.are.equal(slurm.SUCCESS, rc)
    assert.are.equal(1, #written)
    assert.truthy(string.find(written[1], "^sbatch: hivebatch: note: Slurm's %-%-test%-only answer leaves out hivebatch"))
  end)
end)

describe("a new job's --signal", function()
  -- option values as sbatch and srun 22.05 hand them to the filter (tests/fixtures/slurm/cli_filter_signal.txt)
  local function comment(options, env)
    local M = load_filter()
    return M.signal_comment(function(name) return options[name] end, function(name) return (env or {})[name] end)
  end

  it("goes to the job_submit plugin in front of the comment, as Slurm merged it", function()
    assert.are.equal("hivebatch:signal:B:USR1@30", comment({ type = "sbatch", signal = "B:USR1@30" }))
    assert.are.equal("hivebatch:signal:USR1 hello", comment({ type = "sbatch", signal = "USR1", comment = "hello" }))
    assert.are.equal("hivebatch:signal:USR1@10", comment({ type = "srun", signal = "USR1@10" }))
    -- sbatch or salloc in a running job makes a new job
    assert.are.equal("hivebatch:signal:B:INT@20", comment({ type = "sbatch", signal = "B:INT@20" }, { SLURM_JOB_ID = "7" }))
    assert.are.equal("hivebatch:signal:USR1", comment({ type = "salloc", signal = "USR1" }, { SLURM_JOB_ID = "7" }))
  end)

  it("is not written without one, for a step of a job, or for a --test-only", function()
    assert.is_nil(comment({ type = "sbatch", signal = "0@0" }))
    assert.is_nil(comment({ type = "srun", signal = "USR1@10" }, { SLURM_JOB_ID = "7" }))
    assert.is_nil(comment({ type = "srun", signal = "USR1@10", jobid = "7" }))
    assert.is_nil(comment({ type = "sbatch", signal = "B:USR1@30", ["test-only"] = "set" }))
  end)

  it("is set on the options in pre_submit", function()
    load_filter()
    local options = { type = "sbatch", signal = "B:USR1@30", comment = "mine" }
    assert.are.equal(slurm.SUCCESS, slurm_cli_pre_submit(options, 0))
    assert.are.equal("hivebatch:signal:B:USR1@30 mine", options.comment)
  end)
end)
