-- The `slurm` table slurmctld gives job_submit.lua, recording what the plugin logs and says to the user.
-- Specs install a fresh one before loading the plugin: dofile("tests/lua/fake_slurm.lua")
_G.slurm = {
  SUCCESS = 0, ERROR = -1, ESLURM_ACCESS_DENIED = 2002,
  logged = {}, user_msgs = {},
  log_info = function(fmt, ...) table.insert(slurm.logged, string.format(fmt, ...)) end,
  log_error = function(fmt, ...) table.insert(slurm.logged, "ERROR " .. string.format(fmt, ...)) end,
  log_user = function(fmt, ...) table.insert(slurm.user_msgs, string.format(fmt, ...)) end,
}
