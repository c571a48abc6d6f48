-- Unit tests of hivebatch's job_submit plugin logic, run with Lua 5.1 (the Lua slurmctld links) and busted:
--   lua5.1 /usr/bin/busted tests/lua
-- job_desc tables mimic what slurmctld 22.05 hands the plugin (recorded on the lab, see
-- tests/fixtures/slurm/job_submit_lua.log): unset numbers are NO_VAL, unset strings nil.

local NO_VAL, NO_VAL16, INFINITE = 4294967294, 65534, 4294967295

local function load_plugin()
  dofile("tests/lua/fake_slurm.lua")
  _G.HIVEBATCH_SITE = {
    gpu_types = { v100 = { name = "V100", max_per_node = 8, nodes = 4, total = 32, mem_mib = 32768 } },
    type_list = "v100",
    largest = { name = "V100", max_per_node = 8, nodes = 4, total = 32, mem_mib = 32768 },
    vcs = {
      cv = { gpus = 12, whole_nodes = { v100 = 1 }, node_gpus = { v100 = 8 } },
      nlp = { gpus = 16, whole_nodes = { v100 = 2 }, node_gpus = { v100 = 8 } },
      sys = { gpus = 4, whole_nodes = { v100 = 0 }, node_gpus = { v100 = 2 } },
    },
    vc_list = "cv, nlp, sys",
    classes = { urgent = true, prior = true, normal = true, opportunistic = true },
    class_list = "urgent, prior, normal, opportunistic",
    default_class = "normal",
    opportunistic = "opportunistic",
    shard_mib = 1024,
    max_time_min = 525600,
    operator_uids = { [0] = true, [990] = true },
  }
  dofile("hivebatch/data/spread.lua") -- written into both, above their own logic
  dofile("hivebatch/data/job_submit.lua")
  return HIVEBATCH
end

local function desc(fields)
  local d = {
    user_name = "alice", default_account = "cv", default_qos = "normal", priority = NO_VAL,
    min_nodes = NO_VAL, max_nodes = NO_VAL, num_tasks = NO_VAL, ntasks_per_node = NO_VAL16,
    ntasks_per_tres = NO_VAL16, sockets_per_node = NO_VAL16, time_limit = NO_VAL, het_job_offset = NO_VAL,
    script = "#!/bin/bash\ntrue\n", -- sbatch's; srun and salloc send none
  }
  for k, v in pairs(fields) do d[k] = v end
  return d
end

local function request_of(d)
  local prefix = "hivebatch:v2:"
  assert.are.equal(prefix, string.sub(d.admin_comment, 1, #prefix))
  local r = {}
  for k, v in string.gmatch(d.admin_comment, '"([%w_]+)":("?[^,"}]*"?)') do
    r[k] = tonumber(v) or v:gsub('"', "")
  end
  return r
end

describe("slurm_job_submit", function()
  before_each(load_plugin)

  it("takes a --gres GPU ask off the job, records it and holds the job", function()
    local d = desc({ tres_per_node = "gres:gpu:2" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    assert.are.equal("", d.tres_per_node)
    assert.are.equal(0, d.priority)
    local r = request_of(d)
    assert.are.same({ vc = "cv", qos = "normal", gpus = 2, gpus_per_node = 2, nodes = 1 }, r)
  end)

  it("holds a job whose time limit is past the bound, planned as one without a limit, the limit Slurm's", function()
    -- sbatch -t 99999999999999 arrives wrapped into 32 bits; -t 600000 (416 days) as it is
    for _, tl in ipairs({ 4285083375, 600000 }) do
      local d = desc({ tres_per_node = "gres:gpu:1", time_limit = tl })
      assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
      assert.are.same({ vc = "cv", qos = "normal", gpus = 1, gpus_per_node = 1, nodes = 1 }, request_of(d))
      assert.are.equal(tl, d.time_limit)
    end
    local d = desc({ tres_per_node = "gres:gpu:1", time_limit = 525600 })
    slurm_job_submit(d, {}, 1001)
    assert.are.equal(525600 * 60, request_of(d).time_limit_s)
  end)

  it("keeps other GRES and licenses on the job", function()
    local d = desc({ tres_per_node = "gres:gpu:1,gres:nic:1" })
    slurm_job_submit(d, {}, 1001)
    assert.are.equal("gres:nic:1", d.tres_per_node)
  end)

  it("reads --gpus as a job total and leaves the shape open", function()
    local d = desc({ tres_per_job = "gres:gpu:3" })
    slurm_job_submit(d, {}, 1001)
    assert.are.same({ vc = "cv", qos = "normal", gpus = 3 }, request_of(d))
    assert.are.equal("", d.tres_per_job)
  end)

  it("splits --gpus over a fixed -N evenly, telling nobody", function()
    local d = desc({ tres_per_job = "gres:gpu:4", min_nodes = 2, max_nodes = 2, account = "nlp" })
    slurm_job_submit(d, {}, 1001)
    assert.are.same({ vc = "nlp", qos = "normal", gpus = 4, nodes = 2, gpus_per_node = 2 }, request_of(d))
    assert.are.same({}, slurm.user_msgs)
  end)

  it("runs a node range on the fewest nodes it allows, and says so", function()
    local d = desc({ tres_per_node = "gres:gpu:1", min_nodes = 2, max_nodes = 3, account = "nlp" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    assert.are.same({ vc = "nlp", qos = "normal", gpus = 2, nodes = 2, gpus_per_node = 1 }, request_of(d))
    assert.are.same({ "hivebatch: note: -N 2-3 runs on 2 nodes, the fewest it allows: a job gets one node count here" }, slurm.user_msgs)
    -- from one node up: one node, as a job without -N
    local one = desc({ tres_per_job = "gres:gpu:2", min_nodes = 1, max_nodes = 2 })
    slurm_job_submit(one, {}, 1001)
    assert.are.same({ vc = "cv", qos = "normal", gpus = 2 }, request_of(one))
  end)

  it("runs --gpus that -N does not split evenly on the same GPUs per node, rounded up, and says so", function()
    local odd = desc({ tres_per_job = "gres:gpu:3", min_nodes = 2, max_nodes = 2, account = "nlp" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(odd, {}, 1001))
    assert.are.same({ vc = "nlp", qos = "normal", gpus = 4, nodes = 2, gpus_per_node = 2 }, request_of(odd))
    assert.are.same({ "hivebatch: note: 3 GPUs run as 2 on each of 2 nodes (4 in all, counted against nlp): a job gets the same GPUs on every node here" }, slurm.user_msgs)
    local tasks = desc({ tres_per_task = "gres:gpu:1", num_tasks = 5, min_nodes = 2, max_nodes = 2, account = "nlp" })
    slurm_job_submit(tasks, {}, 1001)
    assert.are.same({ 2, 3, 6 }, { request_of(tasks).nodes, request_of(tasks).gpus_per_node, request_of(tasks).gpus })
  end)

  it("places a --gpus total no node count splits evenly on the smallest even placement", function()
    -- 11 on 8-GPU nodes: Slurm takes 7 + 4; the fewest GPUs with the same count per node is 2 x 6
    local d = desc({ tres_per_job = "gres:gpu:11", account = "nlp" })
    slurm_job_submit(d, {}, 1001)
    assert.are.same({ vc = "nlp", qos = "normal", gpus = 12, nodes = 2, gpus_per_node = 6 }, request_of(d))
    assert.matches("11 GPUs run as 6 on each of 2 nodes", slurm.user_msgs[1])
    -- 13 for nlp (16 GPUs): 2 x 7
    local nlp = desc({ tres_per_job = "gres:gpu:13", account = "nlp" })
    slurm_job_submit(nlp, {}, 1001)
    assert.are.same({ 2, 7, 14 }, { request_of(nlp).nodes, request_of(nlp).gpus_per_node, request_of(nlp).gpus })
    -- 16 splits as 2 x 8 and keeps its shape open; 9 would split as 3 x 3, but nlp spans two nodes
    local open = desc({ tres_per_job = "gres:gpu:16", account = "nlp" })
    slurm_job_submit(open, {}, 1001)
    assert.are.same({ vc = "nlp", qos = "normal", gpus = 16 }, request_of(open))
    local nine = desc({ tres_per_job = "gres:gpu:9", account = "nlp" })
    slurm_job_submit(nine, {}, 1001)
    assert.are.same({ 2, 5, 10 }, { request_of(nine).nodes, request_of(nine).gpus_per_node, request_of(nine).gpus })
  end)

  it("refuses a job on more nodes than its virtual cluster's whole-node cells, saying what runs", function()
    -- cv holds one whole node (and a socket): 11 GPUs would take 2 x 6, 4 over -N 2 two nodes
    local d = desc({ tres_per_job = "gres:gpu:11" })
    assert.are.equal(slurm.ERROR, slurm_job_submit(d, {}, 1001))
    assert.are.same({ "hivebatch: a job on 2 nodes needs as many whole-node cells, and virtual cluster cv has 1: ask for at most 8 GPUs on one node, or submit it with --qos=opportunistic to run on idle GPUs" }, slurm.user_msgs)
    local sys = desc({ tres_per_node = "gres:gpu:1", min_nodes = 2, max_nodes = 2, account = "sys" })
    assert.are.equal(slurm.ERROR, slurm_job_submit(sys, {}, 1001))
    assert.matches("virtual cluster sys has 0: ask for at most 2 GPUs on one node", slurm.user_msgs[2])
    local opp = desc({ tres_per_job = "gres:gpu:3", min_nodes = 2, max_nodes = 2, account = "sys", qos = "opportunistic" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(opp, {}, 1001))
    -- idle GPUs outside the guarantee: nothing is counted against the VC
    assert.are.equal("hivebatch: note: 3 GPUs run as 2 on each of 2 nodes (4 in all): a job gets the same GPUs on every node here", slurm.user_msgs[3])
    local one = desc({ tres_per_job = "gres:gpu:8" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(one, {}, 1001))
    -- `srun -n 32 --gres=gpu:2`: the cli_filter asks for the 2 nodes its tasks need, so they may be the cause
    local tasks = desc({ tres_per_job = "gres:gpu:4", min_nodes = 2, max_nodes = 2, num_tasks = 32 })
    assert.are.equal(slurm.ERROR, slurm_job_submit(tasks, {}, 1001))
    assert.matches("ask for at most 8 GPUs on one node and tasks one node holds (-n, -c, --ntasks-per-node), or",
      slurm.user_msgs[4], 1, true)
    local four = desc({ tres_per_job = "gres:gpu:8", min_nodes = 4, max_nodes = 4, num_tasks = 16, account = "nlp" })
    assert.are.equal(slurm.ERROR, slurm_job_submit(four, {}, 1001))
    assert.matches("nlp has 2: use at most 2 nodes and tasks 2 nodes hold (-n, -c, --ntasks-per-node), or",
      slurm.user_msgs[5], 1, true)
  end)

  it("tells an srun or salloc user (no script) what their held job waits for", function()
    local d = desc({ tres_per_node = "gres:gpu:1" })
    d.script = nil
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    assert.are.same({ "hivebatch: note: the job waits until hivebatch places it on GPUs of virtual cluster cv; 'hq --me' in another shell says why it waits" }, slurm.user_msgs)
    local batch = desc({ tres_per_node = "gres:gpu:1", script = "#!/bin/bash\ntrue\n" })
    slurm_job_submit(batch, {}, 1001)
    assert.are.equal(1, #slurm.user_msgs)
  end)

  it("passes a zero GPU count untouched, as Slurm runs it without GPUs", function()
    for _, f in ipairs({ { tres_per_node = "gres:gpu:0" }, { tres_per_job = "gres:gpu:0" },
                         { tres_per_task = "gres:gpu:0", num_tasks = 2 } }) do
      local d = desc(f)
      assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
      assert.is_nil(d.admin_comment)
      assert.are_not.equal(0, d.priority) -- not held: Slurm's own business
    end
    local mixed = desc({ tres_per_node = "gres:gpu:0,gres:gpu:2" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(mixed, {}, 1001))
    assert.are.equal(2, request_of(mixed).gpus)
  end)

  it("refuses an srun whose own step Slurm would refuse on per-GPU pins, saying what starts", function()
    local function srun(fields)
      local d = desc(fields)
      d.script, d.argc, d.argv = nil, 1, { "python" }
      return d
    end
    for _, f in ipairs({ { tres_per_node = "gres:gpu:2" }, { tres_per_node = "gres:gpu:v100:1" },
                         { tres_per_job = "gres:gpu:v100:2" } }) do
      slurm.user_msgs = {}
      assert.are.equal(slurm.ERROR, slurm_job_submit(srun(f), {}, 1001))
      assert.matches("srun cannot start its own step with a ", slurm.user_msgs[1], 1, true)
      assert.matches("ask srun for the job's GPUs as --gpus=N, or get them with salloc and run a plain srun inside", slurm.user_msgs[1], 1, true)
    end
    assert.matches("a per-node GPU count (2 per node)", (function()
      slurm.user_msgs = {}
      slurm_job_submit(srun({ tres_per_node = "gres:gpu:2" }), {}, 1001)
      return slurm.user_msgs[1]
    end)(), 1, true)
    for _, f in ipairs({ { tres_per_job = "gres:gpu:2" }, { tres_per_node = "gres:gpu:1" },
                         { tres_per_task = "gres:gpu:2" }, { tres_per_node = "gres:shard:8" } }) do
      assert.are.equal(slurm.SUCCESS, slurm_job_submit(srun(f), {}, 1001))
    end
    -- salloc (no command) and sbatch keep every form
    local salloc = desc({ tres_per_node = "gres:gpu:2" })
    salloc.script = nil
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(salloc, {}, 1001))
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(desc({ tres_per_node = "gres:gpu:v100:2" }), {}, 1001))
  end)

  it("tells the owner of an opportunistic job that may not be requeued that preemption ends it", function()
    local d = desc({ tres_per_node = "gres:gpu:1", qos = "opportunistic", requeue = 0 })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    assert.matches("with %-%-no%-requeue it then ends instead of waiting to run again", slurm.user_msgs[1])
    local kept = desc({ tres_per_node = "gres:gpu:1", qos = "opportunistic", requeue = 1 })
    slurm_job_submit(kept, {}, 1001)
    local normal = desc({ tres_per_node = "gres:gpu:1", requeue = 0 })
    slurm_job_submit(normal, {}, 1001)
    assert.are.equal(1, #slurm.user_msgs)
  end)

  it("refuses more GPUs on one node than the virtual cluster's largest cell holds", function()
    -- sys: a switch pair and two single GPUs, 4 in all; 3 on one node fit none of its cells
    local d = desc({ tres_per_node = "gres:gpu:3", account = "sys" })
    assert.are.equal(slurm.ERROR, slurm_job_submit(d, {}, 1001))
    assert.are.same({ "hivebatch: virtual cluster sys's cells hold at most 2 GPUs on one node, and the job asks for 3 there: ask for at most 2, or submit it with --qos=opportunistic to run on idle GPUs" }, slurm.user_msgs)
    local open = desc({ tres_per_job = "gres:gpu:3", account = "sys" })
    assert.are.equal(slurm.ERROR, slurm_job_submit(open, {}, 1001))
    local two = desc({ tres_per_job = "gres:gpu:2", account = "sys" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(two, {}, 1001))
  end)

  it("refuses a rounded-up ask its virtual cluster cannot hold, with the figures", function()
    -- sys has 4 GPUs: 3 over -N 3 is 1 each (fits); 5 over -N 2 would be 6
    local d = desc({ tres_per_job = "gres:gpu:5", min_nodes = 2, max_nodes = 2, account = "sys" })
    assert.are.equal(slurm.ERROR, slurm_job_submit(d, {}, 1001))
    assert.are.same({ "hivebatch: 5 GPUs run as 3 on each of 2 nodes here (a job gets the same GPUs on every node), 6 in all, but virtual cluster sys has 4: ask for a count that -N splits evenly" }, slurm.user_msgs)
  end)

  it("multiplies --gpus-per-node by -N", function()
    local d = desc({ tres_per_node = "gres:gpu:2", min_nodes = 2, max_nodes = 2, account = "nlp" })
    slurm_job_submit(d, {}, 1001)
    assert.are.same({ vc = "nlp", qos = "normal", gpus = 4, nodes = 2, gpus_per_node = 2 }, request_of(d))
  end)

  it("counts --gpus-per-task by tasks, per node when --ntasks-per-node is given", function()
    local d = desc({ tres_per_task = "gres:gpu:1", num_tasks = 4 })
    slurm_job_submit(d, {}, 1001)
    assert.are.equal(4, request_of(d).gpus)
    local p = desc({ tres_per_task = "gres:gpu:1", ntasks_per_node = 2, min_nodes = 2, max_nodes = 2, account = "nlp" })
    slurm_job_submit(p, {}, 1001)
    assert.are.same({ vc = "nlp", qos = "normal", gpus = 4, nodes = 2, gpus_per_node = 2 }, request_of(p))
  end)

  it("gives each node whole tasks' GPUs when GPUs per task span nodes", function()
    -- Slurm spreads -n 5 over two nodes as 3 + 2 tasks: 6 GPUs on each (as 5 + 5 the job's srun failed)
    local d = desc({ tres_per_task = "gres:gpu:2", num_tasks = 5, account = "nlp" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    assert.are.same({ vc = "nlp", qos = "normal", gpus = 12, nodes = 2, gpus_per_node = 6, gpus_per_task = 2 },
                    request_of(d))
    assert.matches("10 GPUs %(5 tasks with 2 each%) run as 6 on each of 2 nodes %(12 in all", slurm.user_msgs[1])
    local one = desc({ tres_per_task = "gres:gpu:2", num_tasks = 4, account = "nlp" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(one, {}, 1001))
    assert.are.same({ vc = "nlp", qos = "normal", gpus = 8, gpus_per_task = 2 }, request_of(one))
  end)

  it("counts --gpus-per-socket by sockets per node", function()
    local d = desc({ tres_per_socket = "gres:gpu:2", sockets_per_node = 2 })
    slurm_job_submit(d, {}, 1001)
    assert.are.equal(4, request_of(d).gpus_per_node)
    -- Slurm would spread them over the sockets; the cells pack them, and the student is told
    assert.are.same({ "hivebatch: note: --gpus-per-socket=2 counts as 4 GPUs on one node, placed as close together as its cells allow, not spread over its sockets" }, slurm.user_msgs)
    local one = desc({ tres_per_socket = "gres:gpu:2" })
    slurm.user_msgs = {}
    slurm_job_submit(one, {}, 1001)
    assert.are.same({}, slurm.user_msgs)
  end)

  it("keeps the GPU model the user chose, in the config's spelling", function()
    local d = desc({ tres_per_node = "gres:gpu:v100:1" })
    slurm_job_submit(d, {}, 1001)
    assert.are.equal("V100", request_of(d).gpu_type)
  end)

  it("turns a shard ask into a GPU memory slice", function()
    local d = desc({ tres_per_node = "gres:shard:8" })
    slurm_job_submit(d, {}, 1001)
    local r = request_of(d)
    assert.are.equal(8192, r.gpu_mem_mib)
    assert.are.equal(1, r.gpus)
  end)

  it("turns per-GPU CPUs and memory into per-node figures", function()
    local d = desc({ tres_per_node = "gres:gpu:2", cpus_per_tres = "gres:gpu:4", mem_per_tres = "gres:gpu:1000" })
    slurm_job_submit(d, {}, 1001)
    assert.are.equal(8, d.pn_min_cpus)
    assert.are.equal(2000, d.min_mem_per_node)
    assert.are.equal("", d.cpus_per_tres)
    assert.are.equal("", d.mem_per_tres)
  end)

  it("uses the account and QOS given, else the user's defaults", function()
    local d = desc({ tres_per_node = "gres:gpu:1", account = "nlp", qos = "urgent" })
    slurm_job_submit(d, {}, 1001)
    local r = request_of(d)
    assert.are.equal("nlp", r.vc)
    assert.are.equal("urgent", r.qos)
  end)

  it("records the user's own --hold", function()
    local d = desc({ tres_per_node = "gres:gpu:1", priority = 0 })
    slurm_job_submit(d, {}, 1001)
    assert.are.equal(1, request_of(d).user_hold)
  end)

  it("records the user's own --begin, which a release would replace", function()
    local d = desc({ tres_per_node = "gres:gpu:1", priority = 0, begin_time = 1795000000 })
    slurm_job_submit(d, {}, 1001)
    assert.are.equal(1795000000, request_of(d).begin)
    local now = desc({ tres_per_node = "gres:gpu:1", begin_time = 0 })
    slurm_job_submit(now, {}, 1001)
    assert.is_nil(request_of(now).begin)
  end)

  local refusals = {
    { "an unknown GPU model", { tres_per_node = "gres:gpu:a100:1" }, "GPU type 'a100'" },
    { "more GPUs per node than a node has", { tres_per_node = "gres:gpu:9" }, "at most 8" },
    { "more GPUs than the VC holds", { tres_per_job = "gres:gpu:13" }, "virtual cluster cv has 12" },
    { "more nodes than the cluster has", { tres_per_node = "gres:gpu:1", min_nodes = 5, max_nodes = 5 }, "cluster has 4" },
    { "an account that is no VC", { tres_per_node = "gres:gpu:1", account = "physics" }, "not a virtual cluster" },
    { "a QOS that is no class", { tres_per_node = "gres:gpu:1", qos = "debug" }, "not a hivebatch class" },
    { "two GPU models", { tres_per_node = "gres:gpu:v100:1", tres_per_job = "gres:gpu:p100:1" }, "not on this cluster" },
    { "a shard and whole GPUs", { tres_per_node = "gres:gpu:1,gres:shard:4" }, "not both" },
    { "a shard over two nodes", { tres_per_node = "gres:shard:4", min_nodes = 2, max_nodes = 2 }, "one node" },
    { "more GPU memory than one GPU has", { tres_per_node = "gres:shard:40" }, "one GPU has 32" },
    { "a count that is no number", { tres_per_node = "gres:gpu:v100:two" }, "cannot read" },
    -- seen on the lab: --begin=2999-12-31 went unrecorded, and the controller would have started the job at once
    { "a --begin among hivebatch's own marks", { tres_per_node = "gres:gpu:1", begin_time = 32503680000 }, "on or after 2100-01-01" },
    { "no node at all (-N 0), as slurmctld would", { tres_per_node = "gres:gpu:1", min_nodes = 0, max_nodes = 0 }, "Node count specification invalid" },
    { "a --begin of the mark a release sets", { tres_per_node = "gres:gpu:1", begin_time = 4102444800 }, "submit it with --hold" },
  }
  for _, case in ipairs(refusals) do
    it("refuses " .. case[1] .. " with one line", function()
      local d = desc(case[2])
      assert.are.equal(slurm.ERROR, slurm_job_submit(d, {}, 1001))
      assert.are.equal(1, #slurm.user_msgs)
      assert.matches(case[3], slurm.user_msgs[1], 1, true)
      assert.is_nil(d.admin_comment)
    end)
  end

  it("lets an opportunistic job ask for more than its VC holds, up to the cluster", function()
    local d = desc({ tres_per_job = "gres:gpu:20", qos = "opportunistic" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    assert.are.equal(20, request_of(d).gpus)
  end)

  it("passes jobs without GPUs untouched", function()
    local d = desc({ tres_per_node = "gres:nic:1" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    assert.is_nil(d.admin_comment)
    assert.are.equal(NO_VAL, d.priority)
  end)

  it("passes the Operator's jobs untouched", function()
    local d = desc({ tres_per_node = "gres:gpu:g3:1" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 990))
    assert.are.equal("gres:gpu:g3:1", d.tres_per_node)
  end)

  it("fails closed: an internal error refuses the job", function()
    local d = setmetatable({}, { __index = desc({ tres_per_node = "gres:gpu:1" }),
      __newindex = function() error("job_desc is NULL") end })
    assert.are.equal(slurm.ERROR, slurm_job_submit(d, {}, 1001))
    assert.matches("not accepted", slurm.user_msgs[1])
  end)
end)

describe("slurm_job_modify", function()
  before_each(load_plugin)
  local managed = { job_id = 7, admin_comment = 'hivebatch:v2:{"gpus":1,"qos":"normal","vc":"cv"}', priority = 0, tres_per_node = "", site_factor = 0 }
  local function upd(fields)
    local d = { priority = NO_VAL, min_nodes = NO_VAL, max_nodes = NO_VAL, begin_time = 0 }
    for k, v in pairs(fields) do d[k] = v end
    return d
  end

  local guarded = {
    { "the GPU ask", { tres_per_node = "gres:gpu:4" } },
    { "the GPU ask", { tres_per_job = "gres:gpu:4" } },
    { "the node count", { min_nodes = 2 } },
    { "CPUs per GPU", { cpus_per_tres = "gres:gpu:8" } },
  }
  for _, case in ipairs(guarded) do
    it("refuses the owner changing " .. case[1], function()
      assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd(case[2]), managed, {}, 1001))
    end)
  end

  it("lets the owner change the nodes a waiting job lists or excludes, not a pinned one's", function()
    -- plain Slurm lets them; the controller reads them when it places the job
    -- (tests/fixtures/slurm/owner_exclude_nodes.txt)
    local waiting = { job_id = 7, admin_comment = managed.admin_comment, priority = 0, tres_per_node = "", job_state = 0 }
    local pinned = { job_id = 9, admin_comment = managed.admin_comment, priority = 100, tres_per_node = "gres:gpu:g0:1", job_state = 0 }
    for _, change in ipairs({ { exc_nodes = "node1" }, { req_nodes = "node2" }, { req_nodes = "" } }) do
      assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd(change), waiting, {}, 1001))
      assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd(change), pinned, {}, 1001))
    end
    -- a running job's: Slurm refuses the exclusion itself, as on plain Slurm; its node list would shrink it
    local running = { job_id = 10, admin_comment = managed.admin_comment, priority = 100, tres_per_node = "gres:gpu:g0:1", job_state = 1 }
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ exc_nodes = "node1" }), running, {}, 1001))
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ req_nodes = "node1" }), running, {}, 1001))
  end)

  it("has Slurm count a waiting job's CPUs again when its owner changes its CPUs per task", function()
    -- slurmctld recounts them only when the update gives the node count, which is hivebatch's
    -- (tests/fixtures/slurm/update_cpus_per_task.txt)
    local waiting = { job_id = 7, admin_comment = managed.admin_comment, priority = 0, tres_per_node = "",
                      job_state = 0, min_nodes = 2 }
    local d = upd({ cpus_per_task = 16 })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, waiting, {}, 1001))
    assert.are.equal(2, d.min_nodes)
    -- an admin's (Operator's) too
    local admin = upd({ cpus_per_task = 16 })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(admin, waiting, {}, 0))
    assert.are.equal(2, admin.min_nodes)
    -- an update without it, or of a running job (Slurm refuses that itself), keeps the node count unset
    local other = upd({ name = "x" })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(other, waiting, {}, 1001))
    assert.are.equal(NO_VAL, other.min_nodes)
    local running = { job_id = 10, admin_comment = managed.admin_comment, priority = 100,
                      tres_per_node = "gres:gpu:g0:1", job_state = 1, min_nodes = 2 }
    local r = upd({ cpus_per_task = 16 })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(r, running, {}, 1001))
    assert.are.equal(NO_VAL, r.min_nodes)
  end)

  it("lets the owner change name, time limit and comment", function()
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ name = "x", time_limit = 30, comment = "c" }), managed, {}, 1001))
  end)

  it("keeps a job the owner releases behind a far begin time", function()
    local d = upd({ priority = INFINITE })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, managed, {}, 1001))
    assert.are.equal(4102444800, d.begin_time)
  end)

  it("marks a job its owner holds after submitting it, so the controller leaves it", function()
    -- Slurm shows the plugin's own hold as the same user hold (recorded on the lab: JobHeldUser)
    local d = upd({ priority = 0 })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, managed, {}, 1001))
    assert.are.equal(4102444800 + 86400, d.begin_time)
    -- marked at once, so that a start time set before the controller's next cycle is refused
    assert.are.equal(-3, d.site_factor)
    -- but not an array's record: slurmctld would refuse the mark on the next record (the controller marks it)
    local task = { job_id = 8, admin_comment = managed.admin_comment, priority = 0, tres_per_node = "",
                   site_factor = 0, array_job_id = 5 }
    local t = upd({ priority = 0 })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(t, task, {}, 1001))
    assert.is_nil(t.site_factor)
    local pinned = { job_id = 9, admin_comment = managed.admin_comment, priority = 100, tres_per_node = "gres:gpu:g0:1", job_state = 0 }
    local p = upd({ priority = 0 })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(p, pinned, {}, 1001))
    assert.are.equal(4102444800 + 86400, p.begin_time)
    local running = { job_id = 10, admin_comment = managed.admin_comment, priority = 100, tres_per_node = "gres:gpu:g0:1", job_state = 1 }
    local r = upd({ priority = 0 })
    slurm_job_modify(r, running, {}, 1001)
    assert.are.equal(0, r.begin_time) -- Slurm refuses to hold a running job itself
  end)

  it("marks an admin's hold of a waiting job, and drops the begin time the controller holds with", function()
    -- recorded on the lab (tests/fixtures/slurm/admin_hold_marked.txt): both are JobHeldAdmin to Slurm
    local waiting = { job_id = 7, admin_comment = managed.admin_comment, priority = 0, tres_per_node = "", job_state = 0 }
    local admin = upd({ priority = 0 })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(admin, waiting, {}, 0))
    assert.are.equal(4102444800 + 2 * 86400, admin.begin_time)
    local ctl = upd({ priority = 0, begin_time = 4102444800 + 3 * 86400 })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(ctl, waiting, {}, 990))
    assert.are.equal(0, ctl.begin_time)
    -- an admin's release of a job not pinned yet is parked as an owner's is (seen on the lab: Slurm showed
    -- it with no reason and no begin time, free to start it without GPUs); the controller releases pinned jobs
    local released = upd({ priority = INFINITE })
    slurm_job_modify(released, waiting, {}, 0)
    assert.are.equal(4102444800, released.begin_time)
    local pinned = { job_id = 7, admin_comment = managed.admin_comment, priority = 0, tres_per_node = "gres:gpu:g0:1", job_state = 0 }
    local placed = upd({ priority = INFINITE })
    slurm_job_modify(placed, pinned, {}, 990)
    assert.are.equal(0, placed.begin_time)
    -- a pin the controller takes back keeps its GPUs (Slurm never re-types a job): its hold parks it
    -- too, so an admin's release cannot start it on them (recorded: tests/fixtures/slurm/kept_gpus_parked.txt)
    local taken = upd({ priority = 0, begin_time = 4102444800 + 3 * 86400 })
    slurm_job_modify(taken, pinned, {}, 990)
    assert.are.equal(4102444800, taken.begin_time)
    -- an Operator's other updates, a running job and a job hivebatch does not hold are left
    local other = upd({ time_limit = 30 })
    slurm_job_modify(other, waiting, {}, 0)
    assert.are.equal(0, other.begin_time)
    local running = { job_id = 8, admin_comment = managed.admin_comment, priority = 100, tres_per_node = "gres:gpu:g0:1", job_state = 1 }
    local r = upd({ priority = 0 })
    slurm_job_modify(r, running, {}, 0)
    assert.are.equal(0, r.begin_time)
    local plain = { job_id = 9, admin_comment = "", priority = 100, tres_per_node = "", job_state = 0 }
    local p = upd({ priority = 0 })
    slurm_job_modify(p, plain, {}, 0)
    assert.are.equal(0, p.begin_time)
    -- the controller's hold of a job hivebatch does not manage is a plain hold too (its begin time dropped)
    local c = upd({ priority = 0, begin_time = 4102444800 + 3 * 86400 })
    slurm_job_modify(c, plain, {}, 990)
    assert.are.equal(0, c.begin_time)
  end)

  it("marks an Operator's hold where the owner's own hold cannot undo it", function()
    -- plain Slurm ignores an owner's hold of a job held already; it used to replace the admin-hold begin
    -- time, and the controller placed the job (tests/fixtures/slurm/owner_hold_of_held.txt)
    local waiting = { job_id = 7, admin_comment = managed.admin_comment, priority = 0, tres_per_node = "", job_state = 0, site_factor = 0 }
    local admin = upd({ priority = 0 })
    slurm_job_modify(admin, waiting, {}, 0)
    assert.are.equal(-1, admin.site_factor)
    assert.are.equal(4102444800 + 2 * 86400, admin.begin_time)
    local held = { job_id = 7, admin_comment = managed.admin_comment, priority = 0, tres_per_node = "", job_state = 0, site_factor = -1 }
    local owner = upd({ priority = 0 })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(owner, held, {}, 1001))
    assert.are.equal(0, owner.begin_time)
    assert.is_nil(owner.site_factor)
    -- a site's own site factor is left as it is (no mark)
    local weighted = { job_id = 7, admin_comment = managed.admin_comment, priority = 0, tres_per_node = "", job_state = 0, site_factor = 500 }
    local w = upd({ priority = 0 })
    slurm_job_modify(w, weighted, {}, 0)
    assert.is_nil(w.site_factor)
    -- the owner's hold of a job the controller holds, and of one released since (priority no longer 0),
    -- is marked as before
    local ours = upd({ priority = 0 })
    slurm_job_modify(ours, waiting, {}, 1001)
    assert.are.equal(4102444800 + 86400, ours.begin_time)
    local released = { job_id = 7, admin_comment = managed.admin_comment, priority = 100, tres_per_node = "", job_state = 0, site_factor = -1 }
    local rehold = upd({ priority = 0 })
    slurm_job_modify(rehold, released, {}, 1001)
    assert.are.equal(4102444800 + 86400, rehold.begin_time)
    -- an Operator's release clears the mark, as does the controller's hold
    local release = upd({ priority = INFINITE })
    slurm_job_modify(release, held, {}, 0)
    assert.are.equal(0, release.site_factor)
    assert.are.equal(4102444800, release.begin_time)
    local mine = upd({ priority = INFINITE }) -- an uhold's: the controller's hold when it takes the job back clears it
    slurm_job_modify(mine, held, {}, 1001)
    assert.is_nil(mine.site_factor)
    local ctl = upd({ priority = 0, begin_time = 4102444800 + 3 * 86400 })
    slurm_job_modify(ctl, released, {}, 990)
    assert.are.equal(0, ctl.site_factor)
    local plain = upd({ priority = 0, begin_time = 4102444800 + 3 * 86400 })
    slurm_job_modify(plain, waiting, {}, 990)
    assert.is_nil(plain.site_factor)
  end)

  it("lets the owner move a waiting job to another VC, not a placed one nor to an account that is no VC", function()
    -- Slurm lets an owner change a pending job's account; the controller follows it (seen on the lab:
    -- alice's job moved from nlp to cv kept nlp's cells until then)
    local waiting = { job_id = 9, admin_comment = managed.admin_comment, account = "nlp", qos = "normal", priority = 0,
                      tres_per_node = "", job_state = 0, user_name = "alice", user_id = 1001 }
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ account = "cv" }), waiting, {}, 1001))
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ account = "physics" }), waiting, {}, 1001))
    local placed = { job_id = 9, admin_comment = managed.admin_comment, account = "nlp", qos = "normal", priority = 100,
                     tres_per_node = "gres:gpu:g0:1", job_state = 0, user_name = "alice", user_id = 1001 }
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ account = "cv" }), placed, {}, 1001))
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ account = "nlp" }), placed, {}, 1001))  -- the same VC
  end)

  it("lets the owner move the start time of a waiting job, not over a hold or a release", function()
    -- plain Slurm lets them (tests/fixtures/slurm/owner_start_time.txt); the controller waits for it
    local d = upd({ begin_time = 1700000000 })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, managed, {}, 1001))
    assert.are.equal(1700000000, d.begin_time)
    local function with(fields)
      local rec = {}
      for k, v in pairs(managed) do rec[k] = v end
      for k, v in pairs(fields) do rec[k] = v end
      return rec
    end
    -- held by its owner or an Operator (the mark would be lost), released and not taken back yet
    -- (Slurm would start it without GPUs), or a site factor the site set (a mark cannot be told)
    -- and a job holding an earlier pin's GPUs (requeued or taken back), parked by a far begin time
    for _, rec in ipairs({ with({ site_factor = -3 }), with({ site_factor = -1 }), with({ priority = 100 }), with({ site_factor = 500 }),
                           with({ tres_per_node = "gres:gpu:g0:1", job_state = 0 }) }) do
      assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ begin_time = 1700000000 }), rec, {}, 1001))
    end
    -- pinned and released, Slurm starts it when it says (the controller takes back a pin not started in time)
    local placed = with({ tres_per_node = "gres:gpu:g0:1", priority = 100, job_state = 0 })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ begin_time = 1700000000 }), placed, {}, 1001))
  end)

  it("lets the Operator change anything", function()
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ tres_per_node = "gres:gpu:g1:1", req_nodes = "node2", min_nodes = 1 }), managed, {}, 990))
  end)

  it("refuses adding GPUs to a job hivebatch does not manage", function()
    local plain = { job_id = 8, priority = 100, tres_per_node = "" }
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ tres_per_node = "gres:gpu:1" }), plain, {}, 1001))
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ name = "y" }), plain, {}, 1001))
  end)

  it("never writes to the user: slurmctld drops such messages on modify", function()
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ min_nodes = 2 }), managed, {}, 1001))
    assert.are.equal(0, #slurm.user_msgs)
  end)
end)

describe("the job's GPU environment", function()
  before_each(load_plugin)

  -- scripts read it (torchrun --nproc_per_node=$SLURM_GPUS_PER_NODE), and an srun inside reads it back
  -- as its step's ask, which cli_filter.lua turns into one the per-index pins start
  -- (tests/fixtures/slurm/step_gpu_env.txt)
  it("keeps the GPU variables sbatch copied into a batch job", function()
    local env = { SLURM_GPUS_PER_NODE = "2", SLURM_GPUS = "4", SLURM_GPUS_PER_TASK = "2", HOME = "/home/a" }
    local d = desc({ tres_per_node = "gres:gpu:2", environment = env })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    assert.are.same({ SLURM_GPUS_PER_NODE = "2", SLURM_GPUS = "4", SLURM_GPUS_PER_TASK = "2", HOME = "/home/a" },
                    d.environment)
  end)

  it("gives a --gpus total it raised to the same GPUs on every node back to the job", function()
    local d = desc({ tres_per_job = "gres:gpu:3", min_nodes = 2, max_nodes = 2, qos = "opportunistic",
                     environment = { SLURM_GPUS = "3" } })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    assert.are.equal("4", d.environment.SLURM_GPUS)
    local typed = desc({ tres_per_job = "gres:gpu:v100:3", min_nodes = 2, max_nodes = 2, qos = "opportunistic",
                         environment = { SLURM_GPUS = "v100:3" } })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(typed, {}, 1001))
    assert.are.equal("v100:4", typed.environment.SLURM_GPUS)
  end)

  it("gives a whole-node job's GPUs per node back to the job", function()
    HIVEBATCH_SITE.gpu_nodes = { node1 = "v100", node2 = "v100" }
    local parts = { gpu = { name = "gpu", nodes = "node[1-2]", flag_default = 1 } }
    local d = desc({ shared = 0, tres_per_node = "gres:gpu:2", user_name = "bob", default_account = "nlp",
                     environment = { SLURM_GPUS_PER_NODE = "2" } })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, parts, 1001))
    assert.are.equal("8", d.environment.SLURM_GPUS_PER_NODE)
  end)
end)

describe("reservations", function()
  before_each(load_plugin)

  it("leaves a GPU job in an admin's reservation to Slurm, on the reserved nodes", function()
    local d = desc({ tres_per_node = "gres:gpu:2", reservation = "course" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    assert.are.equal("gres:gpu:2", d.tres_per_node)
    assert.is_nil(d.admin_comment)
    assert.are.equal(NO_VAL, d.priority)
  end)

  it("refuses the owner moving a waiting hivebatch job into a reservation", function()
    local managed = { job_id = 7, admin_comment = 'hivebatch:v2:{"gpus":1,"qos":"normal","vc":"cv"}', priority = 0, tres_per_node = "" }
    local d = { priority = NO_VAL, min_nodes = NO_VAL, max_nodes = NO_VAL, begin_time = 0, reservation = "course" }
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(d, managed, {}, 1001))
  end)
end)

describe("the job's --signal, for its preemption notice", function()
  before_each(load_plugin)

  it("records the script's last --signal directive", function()
    local script = "#!/bin/bash\n#SBATCH --signal=USR2@30\n\n#SBATCH -t 10 --signal B:USR1@120\nsrun train.py\n#SBATCH --signal=HUP\n"
    local d = desc({ tres_per_node = "gres:gpu:1", script = script })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    local r = request_of(d)
    assert.are.equal("USR1", r.signal)
    assert.are.equal(120, r.signal_time_s)
    assert.are.equal(1, r.signal_batch)
  end)

  it("lets SBATCH_SIGNAL win over the script, as sbatch does", function()
    local d = desc({
      tres_per_node = "gres:gpu:1",
      script = "#!/bin/bash\n#SBATCH --signal=B:USR1@120\ntrue\n",
      environment = { SBATCH_SIGNAL = "sigterm" },
    })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    local r = request_of(d)
    assert.are.equal("SIGTERM", r.signal)
    assert.is_nil(r.signal_time_s)
    assert.is_nil(r.signal_batch)
  end)

  it("takes the cli_filter's note, Slurm's own merge of the options, over the environment and script", function()
    -- sbatch --signal=INT@20 sigdir.sh, whose directive says B:USR2@45 (cli_filter_signal.txt)
    local d = desc({
      tres_per_node = "gres:gpu:1",
      comment = "hivebatch:signal:B:INT@20 hivebatch:hints:{\"model\":\"bert\"} my run",
      script = "#!/bin/bash\n#SBATCH --signal=B:USR2@45\ntrue\n",
      environment = { SBATCH_SIGNAL = "USR2@45" },
    })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    local r = request_of(d)
    assert.are.equal("INT", r.signal)
    assert.are.equal(20, r.signal_time_s)
    assert.are.equal(1, r.signal_batch)
    assert.are.equal('hivebatch:hints:{"model":"bert"} my run', d.comment) -- as its user wrote it
  end)

  it("gives back the comment of every job the note came with, its own or none", function()
    local cpu = desc({ comment = "hivebatch:signal:USR1@10" }) -- no GPUs: Slurm's alone
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(cpu, {}, 1001))
    assert.are.equal("", cpu.comment) -- Slurm keeps "" as no comment
    local operator = desc({ tres_per_node = "gres:gpu:1", comment = "hivebatch:signal:USR1 mine" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(operator, {}, 0))
    assert.are.equal("mine", operator.comment)
    local plain = desc({ tres_per_node = "gres:gpu:1", comment = "signal: USR1" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(plain, {}, 1001))
    assert.are.equal("signal: USR1", plain.comment)
    assert.is_nil(request_of(plain).signal)
  end)

  it("records nothing without a --signal, or for one sbatch would refuse", function()
    for _, script in ipairs({ "#!/bin/bash\ntrue\n", "#!/bin/bash\n#SBATCH --signal=USR1@soon\n", "#!/bin/bash\n#SBATCH --signal=B:\n" }) do
      local d = desc({ tres_per_node = "gres:gpu:1", script = script })
      assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
      assert.is_nil(request_of(d).signal)
    end
  end)
end)

describe("heterogeneous jobs", function()
  before_each(load_plugin)

  it("refuses a component that asks for GPUs, in one line that says what to do", function()
    local d = desc({ tres_per_job = "gres:gpu:1", het_job_offset = 0 })
    assert.are.equal(slurm.ERROR, slurm_job_submit(d, {}, 1001))
    assert.are.equal(1, #slurm.user_msgs)
    assert.matches("submit the components as separate jobs", slurm.user_msgs[1], 1, true)
  end)

  it("passes components without GPUs", function()
    local d = desc({ het_job_offset = 1 })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    assert.is_nil(d.admin_comment)
  end)
end)

describe("the owner's node list", function()
  before_each(load_plugin)

  it("is kept in the request, since the controller's pin replaces the job's own", function()
    local d = desc({ tres_per_node = "gres:gpu:1", req_nodes = "node[3-4]", min_nodes = 2, account = "nlp" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    assert.are.equal("node[3-4]", request_of(d).nodelist)
  end)

  it("refuses a list shorter than the job, which Slurm would fill up with nodes of its choice", function()
    local d = desc({ tres_per_node = "gres:gpu:1", req_nodes = "node3", min_nodes = 2, max_nodes = 2, account = "nlp" })
    assert.are.equal(slurm.ERROR, slurm_job_submit(d, {}, 1001))
    assert.are.same({ "hivebatch: -w/--nodelist names 1 node(s) but the job runs on 2: a GPU job here runs only on nodes it lists; list 2 nodes, or drop -w" }, slurm.user_msgs)
    local open = desc({ tres_per_job = "gres:gpu:16", req_nodes = "node3", account = "nlp" })
    assert.are.equal(slurm.ERROR, slurm_job_submit(open, {}, 1001))
  end)

  it("is not recorded when the owner named none", function()
    local d = desc({ tres_per_node = "gres:gpu:1" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, {}, 1001))
    assert.is_nil(request_of(d).nodelist)
  end)
end)

describe("--exclusive", function()
  before_each(function()
    load_plugin()
    HIVEBATCH_SITE.gpu_nodes = { node1 = "v100", node2 = "v100", node3 = "v100", node4 = "v100" }
  end)
  local parts = { gpu = { name = "gpu", nodes = "node[1-4]", flag_default = 1 },
                  cpu = { name = "cpu", nodes = "cpu[01-02],login1", flag_default = 0 } }

  it("expands node lists as Slurm writes them", function()
    assert.are.same({ "node1", "node2", "node3", "node5", "gpu07", "x" },
                    HIVEBATCH.expand_hostlist("node[1-3,5],gpu07,x"))
    assert.are.same({ "cpu01", "cpu02", "login1" }, HIVEBATCH.expand_hostlist("cpu[01-02],login1"))
    assert.are.same({}, HIVEBATCH.expand_hostlist(""))
  end)

  it("makes a job without a GPU ask that can land on GPU nodes a whole-node GPU job", function()
    local d = desc({ shared = 0 })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, parts, 1001))
    local r = request_of(d)
    assert.are.same({ 1, 8, 8, 1 }, { r.nodes, r.gpus_per_node, r.gpus, r.exclusive })
    assert.are.equal(0, d.priority)
  end)

  it("counts every GPU of its nodes, whatever it asked", function()
    local d = desc({ shared = 0, tres_per_node = "gres:gpu:2", min_nodes = 2, max_nodes = 2, user_name = "bob", default_account = "nlp" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, parts, 1002))
    local r = request_of(d)
    assert.are.same({ 2, 8, 16 }, { r.nodes, r.gpus_per_node, r.gpus })
  end)

  it("refuses it in one line when its VC holds fewer GPUs than a node", function()
    local d = desc({ shared = 0, default_account = "sys" })
    assert.are.equal(slurm.ERROR, slurm_job_submit(d, parts, 1003))
    assert.matches("--exclusive takes whole nodes with all their 8 GPUs, but virtual cluster sys has 4", slurm.user_msgs[1], 1, true)
  end)

  it("counts --exclusive=user as whole nodes, as it keeps other users off them, and says so", function()
    local d = desc({ shared = 2, tres_per_node = "gres:gpu:1" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, parts, 1001))
    local r = request_of(d)
    assert.are.same({ 1, 8, 8, 1 }, { r.nodes, r.gpus_per_node, r.gpus, r.exclusive })
    assert.are.equal(2, d.shared) -- the owner's other jobs may still share its nodes, as Slurm allows
    assert.matches("--exclusive=user keeps other users' jobs off the job's nodes, so here it takes them whole", slurm.user_msgs[1], 1, true)
    local cpu = desc({ shared = 2 })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(cpu, parts, 1001))
    assert.are.equal(1, request_of(cpu).exclusive)
    local small = desc({ shared = 2, default_account = "sys" })
    assert.are.equal(slurm.ERROR, slurm_job_submit(small, parts, 1003))
    assert.matches("--exclusive=user takes whole nodes with all their 8 GPUs, but virtual cluster sys has 4: drop --exclusive=user and ask", slurm.user_msgs[#slurm.user_msgs], 1, true)
  end)

  it("leaves --exclusive=mcs as asked: without an MCS plugin Slurm shares the node", function()
    local d = desc({ shared = 3, tres_per_node = "gres:gpu:1" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, parts, 1001))
    assert.are.same({ 1, nil }, { request_of(d).gpus, request_of(d).exclusive })
    local cpu = desc({ shared = 3 })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(cpu, parts, 1001))
    assert.is_nil(cpu.admin_comment)
  end)

  it("leaves an exclusive job in a partition without GPU nodes, and a shared one, alone", function()
    local d = desc({ shared = 0, partition = "cpu" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, parts, 1001))
    assert.is_nil(d.admin_comment)
    local s = desc({ shared = NO_VAL16 })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(s, parts, 1001))
    assert.is_nil(s.admin_comment)
  end)
end)

describe("a partition that gives every job whole nodes (OverSubscribe=EXCLUSIVE)", function()
  before_each(function()
    load_plugin()
    HIVEBATCH_SITE.gpu_nodes = { node1 = "v100", node2 = "v100", node3 = "v100", node4 = "v100" }
  end)
  local parts = { gpu = { name = "gpu", nodes = "node[1-3]", flag_default = 1, max_share = 1 },
                  whole = { name = "whole", nodes = "node4", flag_default = 0, max_share = 0 } }

  it("makes a job there a whole-node GPU job, whether it asked for GPUs or not", function()
    local d = desc({ partition = "whole", tres_per_node = "gres:gpu:1" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, parts, 1001))
    local r = request_of(d)
    assert.are.same({ 1, 8, 8, 1 }, { r.nodes, r.gpus_per_node, r.gpus, r.exclusive })
    local cpu = desc({ partition = "whole" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(cpu, parts, 1001))
    assert.are.equal(1, request_of(cpu).exclusive)
  end)

  it("counts a job that may run there or in a shared partition as whole-node too", function()
    local d = desc({ partition = "gpu,whole", tres_per_node = "gres:gpu:1" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, parts, 1001))
    assert.are.equal(8, request_of(d).gpus)
  end)

  it("leaves jobs in the shared partition as they asked", function()
    local d = desc({ tres_per_node = "gres:gpu:1" })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(d, parts, 1001))
    assert.are.same({ 1, nil }, { request_of(d).gpus, request_of(d).exclusive })
  end)

  it("names the partition when the VC holds fewer GPUs than a node", function()
    local d = desc({ partition = "whole", tres_per_node = "gres:gpu:1", default_account = "sys" })
    assert.are.equal(slurm.ERROR, slurm_job_submit(d, parts, 1003))
    assert.matches("partition whole (OverSubscribe=EXCLUSIVE) takes whole nodes with all their 8 GPUs, but virtual cluster sys has 4: submit it to a partition that shares its nodes", slurm.user_msgs[1], 1, true)
  end)

  it("refuses an update moving a job there, unless it already holds whole nodes", function()
    local plain = { job_id = 7, admin_comment = nil, partition = "gpu" }
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify({ partition = "whole" }, plain, parts, 1001))
    local managed = { job_id = 8, admin_comment = 'hivebatch:v2:{"gpus":1,"qos":"normal","vc":"cv"}', partition = "gpu",
                      tres_per_node = "", priority = 0 }
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify({ partition = "whole" }, managed, parts, 1001))
    local whole = { job_id = 9, admin_comment = 'hivebatch:v2:{"exclusive":1,"gpus":8,"gpus_per_node":8,"nodes":1,"qos":"normal","vc":"cv"}',
                    partition = "gpu", tres_per_node = "", priority = 0 }
    assert.are.equal(slurm.SUCCESS, slurm_job_modify({ partition = "whole" }, whole, parts, 1001))
    assert.are.equal(slurm.SUCCESS, slurm_job_modify({ partition = "gpu" }, managed, parts, 1001))
  end)
end)

describe("an update to --exclusive", function()
  before_each(function()
    load_plugin()
    HIVEBATCH_SITE.gpu_nodes = { node1 = "v100" }
  end)
  local parts = { gpu = { name = "gpu", nodes = "node1", flag_default = 1 } }

  it("is refused for a plain job on GPU nodes and for a hivebatch job", function()
    local plain = { job_id = 7, admin_comment = nil, partition = "gpu" }
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify({ shared = 0 }, plain, parts, 1001))
    local managed = { job_id = 8, admin_comment = 'hivebatch:v2:{"gpus":1,"qos":"normal","vc":"cv"}', partition = "gpu",
                      tres_per_node = "", priority = 0 }
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify({ shared = 0 }, managed, parts, 1001))
    assert.are.equal(slurm.SUCCESS, slurm_job_modify({ shared = NO_VAL16 }, plain, parts, 1001))
  end)
end)
