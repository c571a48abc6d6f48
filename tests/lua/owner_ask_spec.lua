-- An owner changes the GPU ask or the node count of a job still waiting for GPUs, as plain Slurm lets
-- them (tests/fixtures/slurm/owner_gpu_update.txt); the plugin passes the new ask to the controller in
-- its notes file:   lua5.1 /usr/bin/busted tests/lua
local support = dofile("tests/lua/controller_file.lua")
local NO_VAL, NO_VAL16 = 4294967294, 65534

local VCS = {
  cv = { gpus = 12, whole_nodes = { v100 = 1 }, node_gpus = { v100 = 8 } },
  nlp = { gpus = 16, whole_nodes = { v100 = 2 }, node_gpus = { v100 = 8 } },
}

-- a waiting job as slurmctld shows it to job_modify: held, no GPUs left on it, its ask in the admin comment
local function waiting(request, extra)
  local rec = { job_id = 7, account = "cv", qos = "normal", priority = 0, tres_per_node = "", site_factor = 0,
                job_state = 0, admin_comment = "hivebatch:v2:" .. request }
  for k, v in pairs(extra or {}) do rec[k] = v end
  return rec
end

local function upd(fields)
  local d = { priority = NO_VAL, min_nodes = NO_VAL, max_nodes = NO_VAL, begin_time = 0, pn_min_cpus = NO_VAL16 }
  for k, v in pairs(fields) do d[k] = v end
  return d
end

local function lines(path)
  local out = {}
  local fh = io.open(path, "r")
  if fh == nil then return out end
  for line in fh:lines() do out[#out + 1] = line end
  fh:close()
  return out
end

local ONE = '{"gpus":1,"gpus_per_node":1,"nodes":1,"qos":"normal","vc":"cv"}'

describe("an owner's new GPU ask for a waiting job", function()
  local file
  before_each(function()
    file = support.file()
    os.remove(file.path)
    os.remove(file.path .. ".1")
    support.load_plugin({ refusals_file = file.path, vcs = VCS })
  end)
  after_each(function()
    os.remove(file.path)
    os.remove(file.path .. ".1")
  end)

  local function ask_noted()
    local all = lines(file.path)
    assert.are.equal(1, #all)
    local t, job, uid, ask = string.match(all[1], '^{"t":(%d+),"job":(%d+),"uid":(%d+),"ask":(%b{})}$')
    assert.is_not_nil(t, all[1])
    assert.are.same({ 7, 1001 }, { tonumber(job), tonumber(uid) })
    return ask
  end

  it("takes Gres= off the job and notes the new per-node count (scontrol update Gres=gpu:2)", function()
    local d = upd({ tres_per_node = "gres:gpu:2" })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, waiting(ONE), {}, 1001))
    assert.are.equal("", d.tres_per_node) -- Slurm keeps no GPUs on a waiting job
    assert.are.equal('{"gpus":2,"gpus_per_node":2,"nodes":1}', ask_noted())
  end)

  it("keeps other GRES the update names on the job", function()
    local d = upd({ tres_per_node = "gres:gpu:2,gres:nic:1" })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, waiting(ONE), {}, 1001))
    assert.are.equal("gres:nic:1", d.tres_per_node)
  end)

  it("lets NumNodes= through to Slurm and keeps the GPUs per node", function()
    local d = upd({ min_nodes = 2 }) -- scontrol sends NumNodes=2 as a minimum only
    local job = waiting('{"gpus":2,"gpus_per_node":2,"nodes":1,"qos":"normal","vc":"nlp"}', { account = "nlp" })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, job, {}, 1001))
    assert.are.equal(2, d.min_nodes)
    assert.are.equal('{"gpus":4,"gpus_per_node":2,"nodes":2}', ask_noted())
  end)

  it("reads TresPerJob= as a --gpus total would be read at submit", function()
    local d = upd({ tres_per_job = "gres/gpu:3" })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, waiting(ONE), {}, 1001))
    assert.are.equal("", d.tres_per_job)
    -- the recorded node count stays: three GPUs on the one node
    assert.are.equal('{"gpus":3,"gpus_per_node":3,"nodes":1}', ask_noted())
  end)

  it("keeps the GPU type of the submit unless the update names one", function()
    local typed = '{"gpu_type":"V100","gpus":1,"gpus_per_node":1,"nodes":1,"qos":"normal","vc":"cv"}'
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ min_nodes = 1 }), waiting(typed), {}, 1001))
    assert.are.equal('{"gpu_type":"V100","gpus":1,"gpus_per_node":1,"nodes":1}', ask_noted())
  end)

  it("turns a GPU memory slice into another size", function()
    local slice = '{"gpu_mem_mib":8192,"gpus":1,"gpus_per_node":1,"nodes":1,"qos":"normal","vc":"cv"}'
    local d = upd({ tres_per_node = "gres:shard:16" })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, waiting(slice), {}, 1001))
    assert.are.equal('{"gpu_mem_mib":16384,"gpus":1,"gpus_per_node":1,"nodes":1}', ask_noted())
  end)

  it("scales the CPUs and memory a --cpus-per-gpu/--mem-per-gpu job got per node", function()
    local per_gpu = '{"cpus_per_gpu":4,"gpus":1,"gpus_per_node":1,"mem_per_gpu_mb":8000,"nodes":1,"qos":"normal","vc":"cv"}'
    local d = upd({ tres_per_node = "gres:gpu:3" })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, waiting(per_gpu), {}, 1001))
    assert.are.equal(12, d.pn_min_cpus)
    assert.are.equal(24000, d.min_mem_per_node)
  end)

  it("changes only the node count of a whole-node job", function()
    local whole = '{"exclusive":1,"gpus":8,"gpus_per_node":8,"nodes":1,"qos":"normal","vc":"nlp"}'
    local job = waiting(whole, { account = "nlp" })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ min_nodes = 2 }), job, {}, 1001))
    assert.are.equal('{"gpus":16,"gpus_per_node":8,"nodes":2}', ask_noted())
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ tres_per_node = "gres:gpu:2" }), job, {}, 1001))
    assert.matches("takes whole nodes with all their GPUs: change its node count", lines(file.path)[2], 1, true)
  end)

  it("refuses an ask the job's VC could never run, noting why for hq", function()
    local d = upd({ tres_per_node = "gres:gpu:8", min_nodes = 2, max_nodes = 2 })
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(d, waiting(ONE), {}, 1001))
    local all = lines(file.path)
    assert.are.equal(1, #all)
    assert.matches('"msg":"hivebatch: 16 GPUs asked, but virtual cluster cv has 12"', all[1], 1, true)
  end)

  it("refuses a node list the new ask would not fit", function()
    local d = upd({ min_nodes = 2, req_nodes = "node1" })
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(d, waiting(ONE, { account = "nlp" }), {}, 1001))
  end)

  it("refuses as before once the GPUs are chosen, for per-task GPUs, or a running job", function()
    local cases = {
      waiting(ONE, { tres_per_node = "gres:gpu:g0:1", priority = 100 }),
      waiting(ONE, { tres_per_node = "gres:gpu:g0:1", priority = 100, array_job_id = 5 }),
      waiting('{"gpus":4,"gpus_per_task":2,"qos":"normal","vc":"cv"}'),
      waiting(ONE, { job_state = 1, tres_per_node = "gres:gpu:g0:1" }),
    }
    for _, job in ipairs(cases) do
      assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ tres_per_node = "gres:gpu:2" }), job, {}, 1001))
    end
    for _, line in ipairs(lines(file.path)) do
      assert.matches("the GPU ask of hivebatch job 7 is set by hivebatch", line, 1, true)
    end
  end)

  it("refuses where the new ask cannot be noted, so that nothing is lost", function()
    support.load_plugin({ refusals_file = "/nonexistent/hivebatch/refused.log", vcs = VCS })
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ tres_per_node = "gres:gpu:2" }), waiting(ONE), {}, 1001))
    support.load_plugin({ vcs = VCS }) -- a site without the notes file
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ tres_per_node = "gres:gpu:2" }), waiting(ONE), {}, 1001))
  end)

  it("leaves an Operator's update of the GPUs alone (the controller pins with it)", function()
    support.load_plugin({ refusals_file = file.path, vcs = VCS, operator_uids = { [0] = true } })
    local d = upd({ tres_per_node = "gres:gpu:g0:1" })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, waiting(ONE), {}, 0))
    assert.are.equal("gres:gpu:g0:1", d.tres_per_node)
    assert.are.equal(0, #lines(file.path))
  end)

  it("builds a second update on the first, which only the notes hold (NumNodes=2, then Gres=gpu:2)", function()
    local job = waiting(ONE, { account = "nlp", submit_time = os.time() - 60 })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ min_nodes = 2 }), job, {}, 1001))
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ tres_per_node = "gres:gpu:2" }), job, {}, 1001))
    local all = lines(file.path)
    assert.are.equal(2, #all)
    assert.matches('"ask":{"gpus":4,"gpus_per_node":2,"nodes":2}}$', all[2])
  end)

  it("reads a rotated file, and no note older than the job (another job of the same id)", function()
    file.write('{"t":100,"job":7,"uid":1001,"ask":{"gpus":6,"gpus_per_node":6,"nodes":1}}\n')
    local job = waiting(ONE, { submit_time = os.time() - 60 })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ min_nodes = 1 }), job, {}, 1001))
    assert.matches('"ask":{"gpus":1,"gpus_per_node":1,"nodes":1}}$', lines(file.path)[2])
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ tres_per_node = "gres:gpu:2" }), job, {}, 1001))
    os.rename(file.path, file.path .. ".1")
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ min_nodes = 1 }), job, {}, 1001))
    assert.matches('"ask":{"gpus":2,"gpus_per_node":2,"nodes":1}}$', lines(file.path)[1])
  end)

  it("notes an array's ask for the whole array, and a later update of any of its records builds on it", function()
    -- slurmctld hands the update to each record of the array; the first waiting one takes the GPUs off
    local meta = waiting(ONE, { job_id = 5, array_job_id = 5 }) -- the array's own record
    local d = upd({ tres_per_node = "gres:gpu:2" })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, meta, {}, 1001))
    local task = waiting(ONE, { job_id = 6, array_job_id = 5, array_task_id = 0 })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, task, {}, 1001)) -- the same update, its GPUs gone
    local all = lines(file.path)
    assert.are.equal(1, #all)
    assert.matches('^{"t":%d+,"job":5,"uid":1001,"array":5,"ask":{"gpus":2,"gpus_per_node":2,"nodes":1}}$', all[1])
    -- an update of one task (scontrol update JobId=5_0) is that task's, building on the array's
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ min_nodes = 1 }), task, {}, 1001))
    assert.matches('^{"t":%d+,"job":6,"uid":1001,"ask":{"gpus":2,"gpus_per_node":2,"nodes":1}}$', lines(file.path)[2])
    -- another array's is not this array's
    local other = waiting(ONE, { job_id = 9, array_job_id = 9 })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ min_nodes = 1 }), other, {}, 1001))
    assert.matches('"job":9,"uid":1001,"array":9,"ask":{"gpus":1,"gpus_per_node":1,"nodes":1}}$', lines(file.path)[3])
  end)
end)

describe("an owner's start time for a waiting job", function()
  local file
  before_each(function()
    file = support.file()
    os.remove(file.path)
    support.load_plugin({ refusals_file = file.path, vcs = VCS })
  end)
  after_each(function()
    os.remove(file.path)
  end)
  local T = 1795960000

  it("is noted over their hold or an admin's, whose mark stays (plain Slurm keeps the hold, takes the time)", function()
    for _, site in ipairs({ -3, -1 }) do
      local d = upd({ begin_time = T })
      assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, waiting(ONE, { site_factor = site }), {}, 1001))
      assert.are.equal(0, d.begin_time) -- Slurm's begin time stays the hold's mark
    end
    local all = lines(file.path)
    assert.are.equal(2, #all)
    assert.matches('^{"t":%d+,"job":7,"uid":1001,"begin":1795960000}$', all[1])
  end)

  it("is noted over the mark of their release the controller has not taken back yet", function()
    local d = upd({ begin_time = T })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, waiting(ONE, { priority = 4294967295 }), {}, 1001))
    assert.are.equal(0, d.begin_time)
    assert.are.equal(1, #lines(file.path))
  end)

  it("goes to Slurm and is noted too while the job waits for GPUs, so a release right after loses nothing", function()
    local d = upd({ begin_time = T })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, waiting(ONE), {}, 1001))
    assert.are.equal(T, d.begin_time)
    assert.matches('"begin":1795960000}$', lines(file.path)[1])
  end)

  it("is refused over the mark of an array's record, of kept GPUs, or where it cannot be noted", function()
    local held_task = waiting(ONE, { site_factor = -3, array_job_id = 5, job_id = 6 })
    local kept = waiting(ONE, { tres_per_node = "gres:gpu:g0:1" }) -- requeued held: priority 0, GPUs kept
    for _, job in ipairs({ held_task, kept }) do
      assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ begin_time = T }), job, {}, 1001))
    end
    support.load_plugin({ refusals_file = "/nonexistent/hivebatch/refused.log", vcs = VCS })
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ begin_time = T }), waiting(ONE, { site_factor = -3 }), {}, 1001))
    local d = upd({ begin_time = T }) -- while it waits for GPUs Slurm takes it all the same
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(d, waiting(ONE), {}, 1001))
    assert.are.equal(T, d.begin_time)
  end)
end)
