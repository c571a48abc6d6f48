-- The job_submit plugin's test of a GPU job against the largest GPU node, which Slurm skips for the
-- held jobs the plugin makes (tests/fixtures/slurm/held_job_sizes.txt); the node sizes come from the
-- file the controller writes each cycle (hivebatch/controller/node_sizes.py).
--   lua5.1 /usr/bin/busted tests/lua

local NO_VAL = 4294967294
local support = dofile("tests/lua/controller_file.lua")
local file = support.file()
local SIZES, sizes_file = file.path, file.write

-- the lab's nodes: 16 CPUs on 2 sockets of 8 cores of 1 thread, 64000 MB and no temporary disk (TmpDisk=0) each
local LAB_NODE = '{ ["cpus"] = 16, ["mem_mb"] = 64000, ["tmp_mb"] = 0, ["sockets"] = 2, ["cores"] = 8, ["threads"] = 1 }'
local function lab_sizes(written_at)
  sizes_file(string.format('return { ["written_at"] = %d, ["sizes"] = { ["any"] = %s, ["v100"] = %s } }',
    written_at or os.time(), LAB_NODE, LAB_NODE))
end

-- a sizes file with each GPU node's own figures (Lua table constructors, as the controller writes them)
local function sizes_with_nodes(sizes, nodes)
  sizes_file(string.format("return { written_at = %d, sizes = %s, nodes = { %s } }", os.time(), sizes, nodes))
end

-- the lab's partitions with small (node3, node4) letting a job use 8 of a node's 16 CPUs, as slurmctld
-- hands them over (MaxCPUsPerNode; INFINITE where unlimited: tests/fixtures/slurm/partition_max_cpus.txt)
local CAPPED = {
  gpu = { name = "gpu", nodes = "node[1-4]", flag_default = 1, total_cpus = 64, max_cpus_per_node = 4294967295 },
  small = { name = "small", nodes = "node[3-4]", total_cpus = 32, max_cpus_per_node = 8 },
}
local LAB_NODES = 'node1 = { type = "v100", cpus = 16, mem_mb = 64000 }, node2 = { type = "v100", cpus = 16, mem_mb = 64000 }, '
  .. 'node3 = { type = "v100", cpus = 16, mem_mb = 64000 }, node4 = { type = "v100", cpus = 16, mem_mb = 64000 }'

local function load_plugin()
  support.load_plugin({
    nodes_file = SIZES,
    gpu_nodes = { node1 = "v100", node2 = "v100", node3 = "v100", node4 = "v100" },
  })
end

local job = support.job

-- a job (as `job` makes it) that names its partition, the messages of earlier submissions cleared
local function job_in(partition, fields)
  local d = job(fields)
  d.partition = partition
  slurm.user_msgs = {}
  return d
end

local CPUS = "hivebatch: the job needs %d CPUs on one node, but the largest node with GPUs has 16: "
  .. "ask for fewer CPUs per node (-c, --cpus-per-gpu, --ntasks-per-node, --mincpus) or spread the tasks over more nodes (-N)"
local MEM = "hivebatch: the job needs %d MB of memory on one node, but the largest node with GPUs has 64000 MB: "
  .. "ask for less (--mem, --mem-per-gpu, --mem-per-cpu)"
local LAYOUT = "hivebatch: the job needs %d %s on one node, but the largest node with GPUs has %d: ask for no more (%s)"
local TMP = "hivebatch: the job needs %d MB of temporary disk on one node (--tmp), but the largest node with GPUs has 0 MB: "
  .. "ask for less, or leave --tmp out"

describe("the size of a GPU job's node at submit", function()
  before_each(function()
    load_plugin()
    lab_sizes()
  end)
  teardown(function() os.remove(SIZES) end)

  -- each refused by plain Slurm on the lab with "Requested node configuration is not available"
  local refused = {
    { "-c 32", { cpus_per_task = 32, pn_min_cpus = 32, min_cpus = 32 }, CPUS:format(32) },
    { "-N 1 -n 32", { num_tasks = 32, min_cpus = 32, min_nodes = 1, max_nodes = 1 }, CPUS:format(32) },
    { "--ntasks-per-node=4 -c 8", { cpus_per_task = 8, pn_min_cpus = 8, ntasks_per_node = 4, num_tasks = 4, min_cpus = 32 }, CPUS:format(32) },
    { "--mincpus=20", { pn_min_cpus = 20 }, CPUS:format(20) },
    { "--cpus-per-gpu=8 --gres=gpu:4", { tres_per_node = "gres:gpu:4", cpus_per_tres = "gres:gpu:8" }, CPUS:format(32) },
    { "--mem=100G", { min_mem_per_node = 102400 }, MEM:format(102400) },
    { "--mem=99999999T, in whole MB", { min_mem_per_node = 104857598951424 }, MEM:format(104857598951424) },
    { "--mem-per-cpu=5000 -c 16", { cpus_per_task = 16, pn_min_cpus = 16, min_cpus = 16, min_mem_per_cpu = 5000 }, MEM:format(80000) },
    { "--mem-per-gpu=40G --gres=gpu:2", { tres_per_node = "gres:gpu:2", mem_per_tres = "gres:gpu:40960" }, MEM:format(81920) },
    { "-N 1 --gpus=2 --cpus-per-gpu=12", { tres_per_node = "", tres_per_job = "gres:gpu:2", cpus_per_tres = "gres:gpu:12", min_nodes = 1, max_nodes = 1 }, CPUS:format(24) },
    { "--tmp=100", { pn_min_tmp_disk = 100 }, TMP:format(100) },
    { "--tmp=1G", { pn_min_tmp_disk = 1024 }, TMP:format(1024) },
    { "--sockets-per-node=3", { sockets_per_node = 3 }, LAYOUT:format(3, "sockets", 2, "--sockets-per-node or -B") },
    { "-B 3", { sockets_per_node = 3 }, LAYOUT:format(3, "sockets", 2, "--sockets-per-node or -B") },
    { "--cores-per-socket=10", { cores_per_socket = 10 }, LAYOUT:format(10, "cores per socket", 8, "--cores-per-socket or -B") },
    { "--threads-per-core=2", { threads_per_core = 2 }, LAYOUT:format(2, "threads per core", 1, "--threads-per-core, -B or --hint") },
    { "--ntasks-per-socket=10 -n 10", { ntasks_per_socket = 10, num_tasks = 10, min_cpus = 10 },
      "hivebatch: the job asks 10 tasks per socket, but the largest node with GPUs has 8 CPUs on a socket: ask for fewer (--ntasks-per-socket)" },
  }
  for _, case in ipairs(refused) do
    it("refuses " .. case[1] .. ", as Slurm would, with one line naming what to change", function()
      assert.are.equal(slurm.ERROR, slurm_job_submit(job(case[2]), {}, 1001))
      assert.are.same({ case[3] }, slurm.user_msgs)
    end)
  end

  -- each accepted by plain Slurm on the lab
  local accepted = {
    { "-c 16 (the node's size)", { cpus_per_task = 16, pn_min_cpus = 16, min_cpus = 16 } },
    { "-N 1 -n 32 -O (overcommit: one CPU)", { num_tasks = 32, min_cpus = 1, min_nodes = 1, max_nodes = 1 } },
    { "-n 32 without -N (Slurm spreads the tasks)", { num_tasks = 32, min_cpus = 32 } },
    { "--mem=0 (whatever the node has)", { min_mem_per_node = 0 } },
    { "--mem=64000", { min_mem_per_node = 64000 } },
    { "--gpus=2 --cpus-per-gpu=12 (Slurm spreads it over two nodes)", { tres_per_node = "", tres_per_job = "gres:gpu:2", cpus_per_tres = "gres:gpu:12" } },
    { "--gpus=2 --mem-per-gpu=40G (one GPU's memory on each of two nodes)", { tres_per_node = "", tres_per_job = "gres:gpu:2", mem_per_tres = "gres:gpu:40960" } },
    { "-c 32 -H (Slurm does not test a held job)", { cpus_per_task = 32, pn_min_cpus = 32, min_cpus = 32, priority = 0 } },
    { "--tmp=0", { pn_min_tmp_disk = 0 } },
    { "-B 2:8:1 (the node's layout)", { sockets_per_node = 2, cores_per_socket = 8, threads_per_core = 1 } },
    { "--hint=nomultithread", { threads_per_core = 1 } },
    { "--ntasks-per-socket=8 -n 16", { ntasks_per_socket = 8, num_tasks = 16, min_cpus = 16 } },
    { "no --tmp", { pn_min_tmp_disk = NO_VAL } },
  }
  for _, case in ipairs(accepted) do
    it("accepts " .. case[1], function()
      assert.are.equal(slurm.SUCCESS, slurm_job_submit(job(case[2]), {}, 1001))
    end)
  end

  -- the lab's one partition, as slurmctld hands it to the plugin: 4 nodes, 64 CPUs in all
  local LAB_PARTITIONS = { gpu = { name = "gpu", nodes = "node[1-4]", flag_default = 1, total_cpus = 64 } }

  it("accepts, as Slurm does, a job asking more CPUs than its partition has in all", function()
    -- plain Slurm: -c 500 accepted, pending PartitionConfig for ever (held_impossible_accepted.txt)
    local d = job({ cpus_per_task = 500, pn_min_cpus = 500, min_cpus = 500 })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, LAB_PARTITIONS, 1001))
    d = job({ cpus_per_task = 32, pn_min_cpus = 32, min_cpus = 32 })
    assert.are.equal(slurm.ERROR, slurm_job_submit(d, LAB_PARTITIONS, 1001))
  end)

  it("measures a job against the largest node of the partitions it may run in", function()
    -- a site with a partition of smaller GPU nodes: Slurm refuses -p small -c 12 there
    sizes_with_nodes('{ any = { cpus = 16, mem_mb = 64000 }, v100 = { cpus = 16, mem_mb = 64000 } }',
      'node1 = { type = "v100", cpus = 8, mem_mb = 32000 }, node2 = { type = "v100", cpus = 8, mem_mb = 32000 }, '
      .. 'node3 = { type = "v100", cpus = 16, mem_mb = 64000 }, node4 = { type = "v100", cpus = 16, mem_mb = 0 }')
    local parts = {
      small = { name = "small", nodes = "node[1-2]", total_cpus = 16 },
      big = { name = "big", nodes = "node[3-4]", flag_default = 1, total_cpus = 32 },
    }
    local twelve = { cpus_per_task = 12, pn_min_cpus = 12, min_cpus = 12 }
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(job(twelve), parts, 1001)) -- the default partition, big
    assert.are.equal(slurm.ERROR, slurm_job_submit(job_in("small", twelve), parts, 1001))
    assert.are.same({ "hivebatch: the job needs 12 CPUs on one node, but the largest node with GPUs in partition small has 8: "
      .. "ask for fewer CPUs per node (-c, --cpus-per-gpu, --ntasks-per-node, --mincpus) or spread the tasks over more nodes (-N)" },
      slurm.user_msgs)
    -- a node whose memory Slurm did not report leaves memory untested in its partition
    local big_mem = job({ min_mem_per_node = 100000 })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(big_mem, parts, 1001))
  end)

  it("measures a job's CPUs on a node against its partition's MaxCPUsPerNode", function()
    -- plain Slurm refused `srun -p small -N 1 -c 12` at submit: "Requested node configuration is not available"
    sizes_with_nodes('{ any = { cpus = 16, mem_mb = 64000 }, v100 = { cpus = 16, mem_mb = 64000 } }', LAB_NODES)
    local twelve = { cpus_per_task = 12, pn_min_cpus = 12, min_cpus = 12 }
    assert.are.equal(slurm.ERROR, slurm_job_submit(job_in("small", twelve), CAPPED, 1001))
    assert.are.same({ "hivebatch: the job needs 12 CPUs on one node, but partition small lets a job use 8 CPUs of a node "
      .. "(MaxCPUsPerNode): ask for fewer CPUs per node (-c, --cpus-per-gpu, --ntasks-per-node, --mincpus) or spread the tasks over more nodes (-N)" },
      slurm.user_msgs)
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(job(twelve), CAPPED, 1001)) -- the default partition, gpu
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(job_in("small,gpu", twelve), CAPPED, 1001))
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(job_in("small", { cpus_per_task = 8, pn_min_cpus = 8, min_cpus = 8 }), CAPPED, 1001))
  end)

  it("measures --tmp against the largest temporary disk of the job's partitions", function()
    sizes_with_nodes('{ any = { cpus = 16, mem_mb = 64000, tmp_mb = 800000 } }',
      'node1 = { type = "v100", cpus = 16, mem_mb = 64000, tmp_mb = 0 }, node2 = { type = "v100", cpus = 16, mem_mb = 64000, tmp_mb = 100000 }, '
      .. 'node3 = { type = "v100", cpus = 16, mem_mb = 64000, tmp_mb = 800000 }, node4 = { type = "v100", cpus = 16, mem_mb = 64000 }')
    local parts = {
      small = { name = "small", nodes = "node[1-2]", total_cpus = 32 },
      big = { name = "big", nodes = "node3", flag_default = 1, total_cpus = 16 },
      unknown = { name = "unknown", nodes = "node4", total_cpus = 16 },
    }
    local tmp = { pn_min_tmp_disk = 200000 }
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(job(tmp), parts, 1001)) -- node3's 800000 MB
    assert.are.equal(slurm.ERROR, slurm_job_submit(job_in("small", tmp), parts, 1001))
    assert.are.same({ "hivebatch: the job needs 200000 MB of temporary disk on one node (--tmp), but the largest node "
      .. "with GPUs in partition small has 100000 MB: ask for less, or leave --tmp out" }, slurm.user_msgs)
    -- a node whose disk Slurm did not report: left to Slurm
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(job_in("unknown", { pn_min_tmp_disk = 900000 }), parts, 1001))
  end)

  it("names the GPU type a typed ask is measured against", function()
    local d = job({ tres_per_node = "gres:gpu:v100:1", cpus_per_task = 32, pn_min_cpus = 32, min_cpus = 32 })
    assert.are.equal(slurm.ERROR, slurm_job_submit(d, {}, 1001))
    assert.matches("the largest node with V100 GPUs has 16", slurm.user_msgs[1], 1, true)
  end)

  it("leaves an Operator's job and a job without GPUs to Slurm", function()
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(job({ cpus_per_task = 32, pn_min_cpus = 32 }), {}, 0))
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(job({ tres_per_node = "", cpus_per_task = 32 }), {}, 1001))
  end)

  local unusable = {
    { "a missing file", function() os.remove(SIZES) end, "cannot read the node sizes file" },
    { "a file that returns no sizes", function() sizes_file("return { written_at = 0 }") end, "holds no node sizes table" },
    { "a stale file", function() lab_sizes(os.time() - 301) end, "is 301 s old" },
    { "a file that reaches for globals", function() sizes_file("os.execute('true'); return {}") end, "holds no node sizes table" },
  }
  for _, case in ipairs(unusable) do
    it("refuses nothing with " .. case[1] .. ", and says why in slurmctld's log", function()
      case[2]()
      assert.are.equal(slurm.SUCCESS, slurm_job_submit(job({ cpus_per_task = 32, pn_min_cpus = 32 }), {}, 1001))
      local said = table.concat(slurm.logged, "\n")
      assert.matches(case[3], said, 1, true)
      assert.matches("node sizes are not checked at submit", said, 1, true)
    end)
  end

  it("refuses nothing for a GPU type the file does not list", function()
    sizes_file(string.format("return { written_at = %d, sizes = {} }", os.time()))
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(job({ cpus_per_task = 32, pn_min_cpus = 32 }), {}, 1001))
  end)
end)

describe("a GPU job whose tasks need more nodes than its VC's whole-node cells", function()
  -- plain Slurm ran `srun --gpus-per-task=1 -n 4 --ntasks-per-node=2` on two nodes; through hivebatch the
  -- controller rejected it in cv (one node cell), and srun hung after saying so
  -- (tests/fixtures/slurm/tasks_spread_over_nodes.txt)
  local VCS = {
    cv = { gpus = 12, whole_nodes = { v100 = 1 }, node_gpus = { v100 = 8 } },
    nlp = { gpus = 16, whole_nodes = { v100 = 2 }, node_gpus = { v100 = 8 } },
  }
  before_each(function()
    support.load_plugin({
      nodes_file = SIZES, vcs = VCS,
      gpu_nodes = { node1 = "v100", node2 = "v100", node3 = "v100", node4 = "v100" },
    })
    lab_sizes()
  end)
  teardown(function() os.remove(SIZES) end)

  local ALSO = ", and a job on several nodes runs in whole-node cells, of which virtual cluster cv has 1: ask for "
  local TASKS = "fewer tasks or CPUs (-n, -c, --ntasks-per-node), or submit it with --qos=opportunistic to run on idle GPUs"
  local refused = {
    { "-n 32 --gres=gpu:2", { num_tasks = 32, min_cpus = 32, tres_per_node = "gres:gpu:2" },
      "its 32 CPUs need 2 nodes of at most 16 CPUs each" .. ALSO .. TASKS },
    { "--gpus-per-task=1 -n 4 --ntasks-per-node=2",
      { num_tasks = 4, ntasks_per_node = 2, min_cpus = 4, tres_per_node = "", tres_per_task = "gres:gpu:1" },
      "its 4 tasks, at most 2 on a node (--ntasks-per-node), need 2 nodes" .. ALSO .. TASKS },
    { "-n 16 --mem-per-cpu=5000", { num_tasks = 16, min_cpus = 16, min_mem_per_cpu = 5000 },
      "its 16 tasks of 5000 MB memory (--mem-per-cpu) need 2 nodes of at most 64000 MB each" .. ALSO
      .. "fewer tasks or less memory per CPU (-n, --mem-per-cpu), or submit it with --qos=opportunistic to run on idle GPUs" },
    { "-n 4 --ntasks-per-node=2 -H (held by its owner: no sizes read, the task count still says)",
      { num_tasks = 4, ntasks_per_node = 2, min_cpus = 4, priority = 0 },
      "its 4 tasks, at most 2 on a node (--ntasks-per-node), need 2 nodes" .. ALSO .. TASKS },
  }
  for _, case in ipairs(refused) do
    it("refuses " .. case[1] .. " in cv at submit, saying what to change", function()
      assert.are.equal(slurm.ERROR, slurm_job_submit(job(case[2]), {}, 1001))
      assert.are.same({ "hivebatch: " .. case[3] }, slurm.user_msgs)
    end)
  end

  local accepted = {
    { "in nlp, whose two node cells hold it", { account = "nlp", num_tasks = 32, min_cpus = 32 } },
    { "as opportunistic work on idle GPUs", { qos = "opportunistic", num_tasks = 32, min_cpus = 32 } },
    { "with tasks one node holds", { num_tasks = 16, min_cpus = 16 } },
    { "with a node range (the controller says what its range allows)", { num_tasks = 32, min_cpus = 32, min_nodes = 1, max_nodes = 2 } },
    -- Slurm ran `-n 64 -O` on one node with one CPU, `-n 64 -c 2 -O` with two (overcommit.txt)
    { "-n 64 -O, overcommitted (one task's CPUs on its one node)", { num_tasks = 64, min_cpus = 1, tres_per_node = "gres:gpu:1" } },
    { "-n 64 -c 2 --mem-per-cpu=5000 -O", { num_tasks = 64, cpus_per_task = 2, pn_min_cpus = 2, min_cpus = 1, min_mem_per_cpu = 5000 } },
  }
  for _, case in ipairs(accepted) do
    it("accepts it " .. case[1], function()
      assert.are.equal(slurm.SUCCESS, slurm_job_submit(job(case[2]), {}, 1001))
    end)
  end

  it("refuses tasks needing more nodes than their partition's MaxNodes, and counts its MinNodes", function()
    -- plain Slurm refused `-n 32 --gres=gpu:1` at submit in MaxNodes=1, accepted `-N 2` there (pending for
    -- ever), and ran `--gres=gpu:1` on two nodes in MinNodes=2 (tests/fixtures/slurm/partition_node_limits.txt)
    local parts = {
      gpu = { name = "gpu", nodes = "node[1-4]", flag_default = 1, min_nodes = 0, max_nodes = 4294967295 },
      one = { name = "one", nodes = "node[3-4]", min_nodes = 1, max_nodes = 1 },
      two = { name = "two", nodes = "node[3-4]", min_nodes = 2, max_nodes = 4294967295 },
    }
    local wide = { account = "nlp", num_tasks = 32, min_cpus = 32, partition = "one" }
    assert.are.equal(slurm.ERROR, slurm_job_submit(job(wide), parts, 1001))
    assert.are.same({ "hivebatch: its 32 CPUs need 2 nodes of at most 16 CPUs each, and Slurm runs a job on at most 1 "
      .. "there (partition one's MaxNodes is 1): ask for fewer tasks or CPUs (-n, -c, --ntasks-per-node)" }, slurm.user_msgs)
    slurm.user_msgs = {}
    for _, ok in ipairs({
      { account = "nlp", num_tasks = 16, min_cpus = 16, partition = "one" },
      { account = "nlp", num_tasks = 32, min_cpus = 32, partition = "one,gpu" },
      { account = "nlp", min_nodes = 2, max_nodes = 2, partition = "one" }, -- Slurm's to leave pending
      { account = "nlp", partition = "two" },
      { partition = "two", min_nodes = 1, max_nodes = 1 }, -- the same
    }) do
      assert.are.equal(slurm.SUCCESS, slurm_job_submit(job(ok), parts, 1001))
    end
    slurm.user_msgs = {}
    assert.are.equal(slurm.ERROR, slurm_job_submit(job({ partition = "two" }), parts, 1001))
    assert.are.same({ "hivebatch: partition two's MinNodes is 2" .. ALSO
      .. "another partition (-p), or submit it with --qos=opportunistic to run on idle GPUs" }, slurm.user_msgs)
  end)

  it("counts the nodes by the memory the job's partition lets it use of each", function()
    -- plain Slurm ran `-n 16 --mem-per-cpu=3000` on two nodes with MaxMemPerNode=30000, and accepted
    -- --mem=40000 there, pending for ever (tests/fixtures/slurm/partition_max_mem.txt)
    sizes_with_nodes('{ any = { cpus = 16, mem_mb = 64000 }, v100 = { cpus = 16, mem_mb = 64000 } }', LAB_NODES)
    local parts = {
      gpu = { name = "gpu", nodes = "node[1-4]", flag_default = 1, total_cpus = 64 },
      p = { name = "p", nodes = "node[3-4]", total_cpus = 32, max_mem_per_node = 30000 },
    }
    local tasks = { num_tasks = 16, min_cpus = 16, min_mem_per_cpu = 3000, partition = "p" }
    assert.are.equal(slurm.ERROR, slurm_job_submit(job(tasks), parts, 1001))
    assert.are.same({ "hivebatch: its 16 tasks of 3000 MB memory (--mem-per-cpu) need 2 nodes of at most 30000 MB each" .. ALSO
      .. "fewer tasks or less memory per CPU (-n, --mem-per-cpu), or submit it with --qos=opportunistic to run on idle GPUs" },
      slurm.user_msgs)
    tasks.partition = "gpu"
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(job(tasks), parts, 1001))
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(job({ min_mem_per_node = 40000, partition = "p" }), parts, 1001))
  end)

  it("counts the nodes by the CPUs the job's partition lets it use of each", function()
    -- plain Slurm ran `srun -p small -n 16 --gres=gpu:2` on two nodes, 8 tasks on each, MaxCPUsPerNode=8
    -- (tests/fixtures/slurm/partition_max_cpus.txt)
    sizes_with_nodes('{ any = { cpus = 16, mem_mb = 64000 }, v100 = { cpus = 16, mem_mb = 64000 } }', LAB_NODES)
    local sixteen = { num_tasks = 16, min_cpus = 16, tres_per_node = "gres:gpu:2", partition = "small" }
    assert.are.equal(slurm.ERROR, slurm_job_submit(job(sixteen), CAPPED, 1001))
    assert.are.same({ "hivebatch: its 16 CPUs need 2 nodes of at most 8 CPUs each" .. ALSO .. TASKS }, slurm.user_msgs)
    sixteen.partition = "gpu"
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(job(sixteen), CAPPED, 1001))
    sixteen.partition, sixteen.account = "small", "nlp"
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(job(sixteen), CAPPED, 1001))
  end)
end)
