"""tfevo.distribute -- population sharding over ``tf.distribute`` replicas.

One script runs unchanged on one CPU, several logical CPUs, several GPUs
(``MirroredStrategy``) and several machines (``MultiWorkerMirroredStrategy``
via ``TF_CONFIG``): each replica evaluates its shard of the population, the
fitness is all-gathered, and every worker calls ``tell`` itself with the same
inputs, so all keep identical state.  Results with a fixed seed do not depend
on the number of replicas.
"""

from tfevo.distribute.cluster import ClusterInfo, apply_tf_config, broadcast_from_chief, read_tf_config
from tfevo.distribute.evaluator import DistributedEvaluator, member_seeds, shard_layout
from tfevo.distribute.host import HostShards, episode_seeds_from_member_seeds
from tfevo.distribute.rollout import ShardedRollout
from tfevo.distribute.strategy import make_strategy, split_cpu

__all__ = ["ClusterInfo", "apply_tf_config", "broadcast_from_chief", "read_tf_config", "DistributedEvaluator",
           "ShardedRollout", "HostShards", "episode_seeds_from_member_seeds", "member_seeds", "shard_layout",
           "make_strategy", "split_cpu"]
