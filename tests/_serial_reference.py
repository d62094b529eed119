"""A one-member-at-a-time rollout on a 1-slot host env: the oracle that pipelined
evaluations are compared against."""

import numpy as np


def serial_returns(env_id, num_members, seeds, steps, act):
    """Episode return of each member, one at a time, on a 1-slot ``env_id``.

    ``act(member, obs [1, *obs], t) -> actions [1, ...]`` chooses the actions
    (it may keep its own per-member state); member ``i`` starts from
    ``seeds[i]`` and plays at most ``steps`` steps.
    """
    from tfevo import envs

    env = envs.make(env_id, num_envs=1)
    out = []
    for i in range(num_members):
        obs = env.reset(np.array([0]), np.array([seeds[i]]))
        total = 0.0
        for t in range(steps):
            env.send(act(i, obs, t), np.array([0]))
            _, obs, r, term, trunc = env.recv()
            total += float(r[0])
            if term[0] or trunc[0]:
                break
        out.append(total)
    env.close()
    return np.array(out)
