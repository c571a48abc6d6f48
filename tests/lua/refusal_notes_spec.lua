-- The plugin notes each owner update it refuses where the controller reads it (slurmctld drops a
-- job_modify message, so the owner sees only "Access/permission denied"):
--   lua5.1 /usr/bin/busted tests/lua
local support = dofile("tests/lua/controller_file.lua")
local NO_VAL = 4294967294

-- placed: its GPUs chosen, so its node count is no longer the owner's to change
local managed = { job_id = 7, admin_comment = 'hivebatch:v2:{"gpus":1,"qos":"normal","vc":"cv"}', priority = 100,
                  tres_per_node = "gres:gpu:g0:1", site_factor = 0, job_state = 0, account = "cv", qos = "normal" }

local function upd(fields)
  local d = { priority = NO_VAL, min_nodes = NO_VAL, max_nodes = NO_VAL, begin_time = 0 }
  for k, v in pairs(fields) do d[k] = v end
  return d
end

local function read(path)
  local fh = io.open(path, "r")
  if fh == nil then return nil end
  local text = fh:read("*a")
  fh:close()
  return text
end

describe("the plugin's notes of refused updates", function()
  local file
  before_each(function()
    file = support.file()
    os.remove(file.path)
    os.remove(file.path .. ".1")
    support.load_plugin({ refusals_file = file.path })
  end)
  after_each(function()
    os.remove(file.path)
    os.remove(file.path .. ".1")
  end)

  it("appends one JSON line per refusal, with the job, the updater and the reason", function()
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ min_nodes = 2 }), managed, {}, 1001))
    local text = read(file.path)
    assert.matches('^{"t":%d+,"job":7,"uid":1001,"msg":"hivebatch: the node count of hivebatch job 7 is set by hivebatch: cancel and resubmit to change it"}\n$', text)
    -- what it lets through is not noted
    assert.are.equal(slurm.SUCCESS, slurm_job_modify(upd({ name = "x" }), managed, {}, 1001))
    assert.are.equal(text, read(file.path))
  end)

  it("starts a new file once the old one passes a megabyte", function()
    file.write(string.rep("x", 1048577))
    slurm_job_modify(upd({ min_nodes = 2 }), managed, {}, 1001)
    assert.are.equal(1048577, #read(file.path .. ".1"))
    assert.matches('^{"t":%d+,"job":7,', read(file.path))
  end)

  it("refuses all the same where the file cannot be written", function()
    support.load_plugin({ refusals_file = "/nonexistent/hivebatch/refused.log" })
    assert.are.equal(slurm.ESLURM_ACCESS_DENIED, slurm_job_modify(upd({ min_nodes = 2 }), managed, {}, 1001))
  end)
end)
