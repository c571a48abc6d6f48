-- The job_submit plugin checks GPU asks against the config as the controller writes it into its node
-- sizes file each cycle (hivebatch/controller/node_sizes.py: GPU types and nodes, VCs, limits), while
-- that file is fresh, else against what was written into the plugin: an admin's change of the config
-- reaches submissions with the controller's next cycle.
--   lua5.1 /usr/bin/busted tests/lua

local NO_VAL = 4294967294
local support = dofile("tests/lua/controller_file.lua")
local sizes, usage = support.file(), support.file()

local LAB_NODE = "{ cpus = 16, mem_mb = 64000, sockets = 2, cores = 8, threads = 1 }"
-- the config after the admin's change: a fifth node, cv shrank to one socket (4 GPUs), sys was added,
-- nlp is unchanged, and jobs may run a day at most
local V100 = "{ name = 'V100', max_per_node = 8, nodes = 5, total = 40, mem_mib = 32768 }"
local CLUSTER = "gpu_types = { v100 = " .. V100 .. " }, type_list = 'v100', largest = " .. V100 .. ", "
  .. "gpu_nodes = { node1 = 'v100', node2 = 'v100', node3 = 'v100', node4 = 'v100', node5 = 'v100' }, "
  .. "max_time_min = 1440, "
local MOVED = CLUSTER .. "vcs = { cv = { gpus = 4, whole_nodes = { v100 = 0 }, node_gpus = { v100 = 4 } }, "
  .. "nlp = { gpus = 16, whole_nodes = { v100 = 2 }, node_gpus = { v100 = 8 } }, "
  .. "sys = { gpus = 8, whole_nodes = { v100 = 1 }, node_gpus = { v100 = 8 } } }, vc_list = 'cv, nlp, sys'"

-- the controller's node sizes file, written `age` seconds ago, with `site` (the text of the config's part
-- of the site table) or none
local function controller_file(site, age)
  local table = site and (", site = { " .. site .. " }") or ""
  sizes.write(string.format("return { written_at = %d, sizes = { any = %s, v100 = %s }%s }",
    os.time() - (age or 0), LAB_NODE, LAB_NODE, table))
end

local function job(fields)
  slurm.user_msgs = {}
  return support.job(fields)
end

local function submitted(fields)
  return slurm_job_submit(job(fields), {}, 1001)
end

describe("the config a GPU job is checked against", function()
  before_each(function()
    -- the plugin as written before the change: cv 12 GPUs, nlp 16, no sys
    support.load_plugin({
      nodes_file = sizes.path, usage_file = usage.path,
      vcs = { cv = { gpus = 12, whole_nodes = { v100 = 1 }, node_gpus = { v100 = 8 } },
              nlp = { gpus = 16, whole_nodes = { v100 = 2 }, node_gpus = { v100 = 8 } } },
    })
  end)
  teardown(function()
    os.remove(sizes.path)
    os.remove(usage.path)
  end)

  it("is the controller's while its file is fresh: a new VC takes jobs, a shrunk one refuses what it lost", function()
    controller_file(MOVED .. ", user_limits = {}")
    assert.are.equal(slurm.SUCCESS, submitted({ account = "sys", tres_per_node = "gres:gpu:8" }))
    assert.are.equal(slurm.ERROR, submitted({ tres_per_node = "", tres_per_job = "gres:gpu:8" }))
    assert.are.same({ "hivebatch: 8 GPUs asked, but virtual cluster cv has 4" }, slurm.user_msgs)
    assert.are.equal(slurm.ERROR, submitted({ account = "physics" }))
    assert.are.same({ "hivebatch: account 'physics' is not a virtual cluster of hivebatch (VCs: cv, nlp, sys)" },
      slurm.user_msgs)
  end)

  local embedded = {
    { "the controller's file is stale (the controller stopped)", function() controller_file(MOVED .. ", user_limits = {}", 3600) end },
    { "the file comes from a controller that writes no VCs", function() controller_file(nil) end },
    { "the file's part of the site table is not whole", function() controller_file(MOVED) end },
    { "there is no file", function() os.remove(sizes.path) end },
  }
  for _, case in ipairs(embedded) do
    it("is the plugin's own when " .. case[1], function()
      case[2]()
      assert.are.equal(slurm.ERROR, submitted({ account = "sys" }))
      assert.are.same({ "hivebatch: account 'sys' is not a virtual cluster of hivebatch (VCs: cv, nlp)" },
        slurm.user_msgs)
      assert.are.equal(slurm.SUCCESS, submitted({ tres_per_node = "", tres_per_job = "gres:gpu:8" }))
    end)
  end

  it("has the controller's GPU nodes and time limit", function()
    local five = { qos = "opportunistic", min_nodes = 5, max_nodes = 5, tres_per_node = "gres:gpu:1" }
    controller_file(nil)
    assert.are.equal(slurm.ERROR, submitted(five))
    assert.are.same({ "hivebatch: 5 nodes with GPUs asked, but the cluster has 4" }, slurm.user_msgs)
    controller_file(MOVED .. ", user_limits = {}")
    assert.are.equal(slurm.SUCCESS, submitted(five))
    -- a limit past the config's is not planned as the job's length (the controller says why it waits)
    local long = job({ time_limit = 2880 })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(long, {}, 1001))
    assert.is_nil(string.find(long.admin_comment, "time_limit_s", 1, true))
    local day = job({ time_limit = 1440 })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(day, {}, 1001))
    assert.truthy(string.find(day.admin_comment, '"time_limit_s":86400', 1, true))
  end)

  it("is read from the file once per submission, with the node sizes", function()
    controller_file(MOVED .. ", user_limits = {}")
    local real, reads = loadfile, 0
    _G.loadfile = function(path)
      if path == sizes.path then reads = reads + 1 end
      return real(path)
    end
    local ok = submitted({ account = "sys", tres_per_node = "gres:gpu:4" })
    _G.loadfile = real
    assert.are.equal(slurm.SUCCESS, ok)
    assert.are.equal(1, reads)
  end)

  it("is read again for each submission", function()
    controller_file(MOVED .. ", user_limits = {}")
    assert.are.equal(slurm.SUCCESS, submitted({ account = "sys" }))
    controller_file(nil)
    assert.are.equal(slurm.ERROR, submitted({ account = "sys" }))
  end)

  it("brings the controller's per-user limits of the strict classes", function()
    controller_file(MOVED .. ", user_limits = { sys = { urgent = { running_jobs = 1 } } }")
    usage.write(string.format("return { written_at = %d, window_s = 604800, uids = { [1001] = 'alice' }, "
      .. "users = { alice = { sys = { urgent = { gpu_hours = 1, running = 1 } } } } }", os.time()))
    assert.are.equal(slurm.ERROR, submitted({ account = "sys", qos = "urgent" }))
    assert.are.same({ "hivebatch: urgent jobs in sys: alice has 1 of 1 urgent jobs holding GPUs; submit as prior or normal" },
      slurm.user_msgs)
    assert.are.equal(slurm.SUCCESS, submitted({ account = "sys", qos = "prior" }))
  end)

  it("is the controller's when an owner moves a waiting job to another VC", function()
    local waiting = { job_id = 7, account = "cv", qos = "normal", priority = 0, tres_per_node = "", job_state = 0,
                      admin_comment = 'hivebatch:v2:{"gpus":1,"qos":"normal","vc":"cv"}' }
    local function move(to)
      return slurm_job_modify({ priority = NO_VAL, min_nodes = NO_VAL, max_nodes = NO_VAL, begin_time = 0, account = to },
        waiting, {}, 1001)
    end
    controller_file(nil)
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, move("sys"))
    controller_file(MOVED .. ", user_limits = {}")
    assert.are.equal(slurm.SUCCESS, move("sys"))
  end)
end)
