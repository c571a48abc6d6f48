-- The job_submit plugin's per-user limits on the strict classes, against the controller's usage file
-- (hivebatch/controller/usage.py writes it; hivebatch/userlimits.py words the same refusal).
--   lua5.1 /usr/bin/busted tests/lua

local NO_VAL, NO_VAL16 = 4294967294, 65534
local support = dofile("tests/lua/controller_file.lua")
local file = support.file()
local USAGE, usage_file = file.path, file.write

local function usage(users, written_at)
  local parts = {}
  for user, figures in pairs(users) do
    parts[#parts + 1] = string.format('["%s"] = { ["cv"] = { ["urgent"] = { ["gpu_hours"] = %s, ["running"] = %d } } }',
      user, tostring(figures[1]), figures[2])
  end
  usage_file(string.format("return { written_at = %d, window_s = 604800, users = { %s }, uids = { [1001] = 'alice' } }",
    written_at or os.time(), table.concat(parts, ", ")))
end

local function load_plugin()
  support.load_plugin({
    user_limits = { cv = { urgent = { gpu_hours_per_week = 48, running_jobs = 2 } } },
    usage_file = USAGE,
  })
end

local function urgent(fields)
  local d = {
    user_name = "alice", default_account = "cv", qos = "urgent", priority = NO_VAL, min_nodes = NO_VAL,
    max_nodes = NO_VAL, num_tasks = NO_VAL, ntasks_per_node = NO_VAL16, ntasks_per_tres = NO_VAL16,
    sockets_per_node = NO_VAL16, time_limit = NO_VAL, tres_per_node = "gres:gpu:1",
  }
  for k, v in pairs(fields or {}) do d[k] = v end
  return d
end

local function errors()
  local out = {}
  for _, line in ipairs(slurm.logged) do
    if line:sub(1, 6) == "ERROR " then out[#out + 1] = line end
  end
  return out
end

describe("per-user limits at submit", function()
  before_each(load_plugin)
  teardown(function() os.remove(USAGE) end)

  it("accepts an urgent job under the limits", function()
    usage({ alice = { 47.5, 1 } })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(urgent(), {}, 1001))
  end)

  local refused = {
    { "at the GPU-hour limit", { 48, 0 }, "alice used 48 of 48 GPU-hours in the last 7 days" },
    { "over the GPU-hour limit", { 52.25, 0 }, "alice used 52.2 of 48 GPU-hours in the last 7 days" },
    { "while two of the user's urgent jobs hold GPUs", { 3, 2 }, "alice has 2 of 2 urgent jobs holding GPUs" },
  }
  for _, case in ipairs(refused) do
    it("refuses an urgent job " .. case[1] .. " with one line naming what to do", function()
      usage({ alice = case[2] })
      assert.are.equal(slurm.ERROR, slurm_job_submit(urgent(), {}, 1001))
      assert.are.same({ "hivebatch: urgent jobs in cv: " .. case[3] .. "; submit as prior or normal" }, slurm.user_msgs)
    end)
  end

  it("counts each user apart, and limits only the class and VC the config names", function()
    usage({ alice = { 60, 2 } })
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(urgent({ user_name = "bob" }), {}, 1002))
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(urgent({ qos = "normal" }), {}, 1001))
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(urgent({ qos = "prior" }), {}, 1001))
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(urgent({ account = "nlp" }), {}, 1001))
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(urgent({ tres_per_node = "" }), {}, 1001)) -- no GPUs
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(urgent(), {}, 0)) -- an Operator
  end)

  local unusable = {
    { "a missing usage file", function() os.remove(USAGE) end, "cannot read the usage file" },
    { "a file that is not Lua", function() usage_file("return { users = ") end, "cannot read the usage file" },
    { "a file that returns no usage table", function() usage_file("return 42") end, "holds no usage table" },
    { "a file that raises", function() usage_file("error('x')") end, "holds no usage table" },
    { "a stale file", function() usage({ alice = { 60, 2 } }, os.time() - 301) end, "is 301 s old" },
  }
  for _, case in ipairs(unusable) do
    it("does not refuse anybody with " .. case[1] .. ", and says why in slurmctld's log", function()
      case[2]()
      assert.are.equal(slurm.SUCCESS, slurm_job_submit(urgent(), {}, 1001))
      local logged = errors()
      assert.are.equal(1, #logged)
      assert.matches(case[3], logged[1], 1, true)
      assert.matches("urgent limits are checked at placement only", logged[1], 1, true)
    end)
  end

  it("runs the usage file as data only: it reaches no global", function()
    usage_file("PWNED = true; os.execute('true'); return { written_at = 0, users = {} }")
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(urgent(), {}, 1001))
    assert.is_nil(rawget(_G, "PWNED"))
    assert.matches("holds no usage table", errors()[1], 1, true)
  end)

  it("reads figures of the wrong shape as no use", function()
    usage_file(string.format("return { written_at = %d, users = { alice = { cv = 'x' } } }", os.time()))
    assert.are.equal(slurm.SUCCESS, slurm_job_submit(urgent(), {}, 1001))
    assert.are.same({}, errors())
  end)
end)

describe("per-user limits on a class change", function()
  before_each(load_plugin)
  teardown(function() os.remove(USAGE) end)
  local waiting = {
    -- as slurmctld 22.05 hands it over: the owner by uid, job_rec.user_name unset
    job_id = 7, user_id = 1001, account = "cv", qos = "normal", priority = 0, tres_per_node = "",
    admin_comment = 'hivebatch:v2:{"gpus":1,"qos":"normal","vc":"cv"}',
  }
  local function upd(fields)
    local d = { priority = NO_VAL, min_nodes = NO_VAL, max_nodes = NO_VAL, begin_time = 0 }
    for k, v in pairs(fields) do d[k] = v end
    return d
  end

  it("refuses the owner moving a waiting job to urgent over the limit", function()
    usage({ alice = { 50, 0 } })
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ qos = "urgent" }), waiting, {}, 1001))
    assert.matches("urgent jobs in cv: alice used 50 of 48", slurm.logged[1], 1, true)
  end)

  it("finds no use for an owner the usage file does not list", function()
    usage({ alice = { 50, 0 } })
    local other = {}
    for k, v in pairs(waiting) do other[k] = v end
    other.user_id = 1002
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ qos = "urgent" }), other, {}, 1002))
  end)

  it("lets the owner move it to urgent under the limit, or anywhere else over it", function()
    usage({ alice = { 10, 1 } })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ qos = "urgent" }), waiting, {}, 1001))
    usage({ alice = { 50, 0 } })
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ qos = "prior" }), waiting, {}, 1001))
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ name = "renamed" }), waiting, {}, 1001))
  end)

  it("checks an urgent job moved into a VC where its owner is over the limit", function()
    usage({ alice = { 50, 0 } })
    local elsewhere = {}
    for k, v in pairs(waiting) do elsewhere[k] = v end
    elsewhere.account, elsewhere.qos = "nlp", "urgent"
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ account = "cv" }), elsewhere, {}, 1001))
  end)
end)
