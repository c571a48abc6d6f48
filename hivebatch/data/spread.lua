-- How many nodes Slurm spreads a job with no node count over, shared by job_submit.lua (which refuses
-- one its VC's whole-node cells cannot hold) and cli_filter.lua (which asks srun for those nodes, with
-- the per-node GPUs on each); `hadmin slurm-config` writes it into both. The controller plans such a
-- job by the same rule (hivebatch/controller/decide/spread.py, nodes_for_tasks): Slurm put
-- `sbatch -n 32 --gres=gpu:2` on 16-CPU nodes on two of them or more
-- (tests/fixtures/slurm/tasks_spread_over_nodes.txt).
HIVEBATCH_SPREAD = {}

-- ``tasks`` of ``per_task`` CPUs each, ``per_cpu`` MB of memory per CPU (0: not asked), at most
-- ``on_node`` tasks on a node (0: not asked), on nodes of at most ``cpus`` CPUs and ``mem`` MB (0: not
-- known): the fewest nodes that hold them, and the rule that set it ("cpus", "mem", "tasks"; nil where
-- one node does). A task larger than any node is not spread: Slurm never runs it.
function HIVEBATCH_SPREAD.nodes(tasks, per_task, per_cpu, on_node, cpus, mem)
  if tasks <= 1 or (cpus > 0 and per_task > cpus) then
    return 1, nil
  end
  local need, rule = 1, nil
  if cpus > 0 and tasks * per_task > cpus then
    need, rule = math.ceil(tasks * per_task / cpus), "cpus"
  end
  if per_cpu > 0 and mem > 0 then
    local fit = math.floor(mem / (per_task * per_cpu))
    if fit > 0 and math.ceil(tasks / fit) > need then
      need, rule = math.ceil(tasks / fit), "mem"
    end
  end
  if on_node > 0 and math.ceil(tasks / on_node) > need then
    need, rule = math.ceil(tasks / on_node), "tasks"
  end
  return need, rule
end

-- ``range`` ({fewest, most}; nil: none yet) widened by a partition that runs a job on ``fewest`` to
-- ``most`` nodes (0: any): Slurm runs a job of several partitions in whichever takes it, so the loosest
-- bounds count (MinNodes, MaxNodes: tests/fixtures/slurm/partition_node_limits.txt)
function HIVEBATCH_SPREAD.looser(range, fewest, most)
  if range == nil then
    return { fewest = fewest, most = most }
  end
  return { fewest = math.min(range.fewest, fewest), most = (range.most == 0 or most == 0) and 0 or math.max(range.most, most) }
end
