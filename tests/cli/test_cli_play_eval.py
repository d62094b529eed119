"""`tfevo play` and `tfevo eval` on a toy run of every environment family, headless."""

import json
import re

import numpy as np
import pytest

from tfevo.cli import main

FAMILIES = {
    # trained through Gymnasium's CartPole (pipelined): the same task as the in-graph one, no long tracing
    "classic": ["--set", "env.id=CartPole-v1", "--set", "policy.kind=linear", "--set", "env.max_steps=8"],
    "mujoco": ["--set", "env.id=Swimmer-v5", "--set", "policy.kind=linear", "--set", "env.max_steps=8"],
    # non-default preprocessing (2 stacked 42x42 frames): play must feed the policy what training did
    "atari": ["--set", "env.id=ALE/Pong-v5", "--set", "policy.kind=linear", "--set", "env.max_steps=8",
              "--set", 'env.kwargs={"stack_num": 2, "img_height": 42, "img_width": 42}'],
}
NEEDS = {"classic": "gymnasium", "mujoco": "mujoco", "atari": "ale_py"}


@pytest.fixture(scope="module", params=list(FAMILIES))
def toy_run(request, tmp_path_factory):
    family = request.param
    pytest.importorskip(NEEDS[family])
    run = tmp_path_factory.mktemp(family) / "run"
    kind = "pipelined" if family == "classic" else "auto"
    args = ["train", "--run-dir", str(run), "--generations", "1", "--no-progress", "--set", "algorithm.popsize=2",
            "--set", "env.episodes=1", "--set", f"evaluator.kind={kind}", *FAMILIES[family]]
    assert main(args) == 0
    return family, run


def test_play_renders_headless_through_the_training_preprocessing(toy_run, tmp_path, capfd):
    import imageio.v2 as imageio

    family, run = toy_run
    capfd.readouterr()
    video = tmp_path / "play.gif"
    assert main(["play", str(run), "--video", str(video), "--max-steps", "6"]) == 0
    out, err = capfd.readouterr()
    assert "XDG_RUNTIME_DIR" not in err and "error" not in err.lower(), err
    m = re.search(r"return (\S+) over (\d+) steps", out)
    assert m, out
    steps = int(m.group(2))
    assert 1 <= steps <= 6
    frames = imageio.mimread(video)
    assert frames[0].ndim == 3 and frames[0].shape[-1] in (3, 4)
    assert len(frames) >= 2  # GIF merges identical consecutive frames, so <= steps + 1
    if family == "atari":
        assert frames[0].shape[:2] == (210, 160)  # the colour screen, not the policy's 42x42 input
        assert int(np.ptp(np.asarray(frames[0])[..., :3].astype(int), axis=-1).max()) > 0  # in colour
    assert max(f.shape[0] for f in frames) >= 160


def test_eval_prints_the_same_statistics_for_every_family(toy_run, capsys):
    family, run = toy_run
    assert main(["eval", str(run), "--episodes", "3"]) == 0
    out = capsys.readouterr().out
    m = re.search(r"mean (\S+)\s+std (\S+)\s+min (\S+)\s+max (\S+)\n\s+returns: (.*)", out)
    assert m, out
    mean, std, lo, hi = map(float, m.groups()[:4])
    rets = np.array([float(x) for x in m.group(5).split()])
    assert rets.size == 3
    np.testing.assert_allclose([mean, std, lo, hi], [rets.mean(), rets.std(), rets.min(), rets.max()],
                               rtol=1e-3, atol=1e-3)
    rows = [json.loads(l) for l in (run / "progress.jsonl").read_text().splitlines()]
    assert [r["generation"] for r in rows] == [1]


def test_play_builds_the_task_the_run_trained_on(tmp_path, capfd):
    """The run's env options reach the played Gymnasium env: CartPole trained with Sutton and Barto's
    reward (0 per step, -1 on failure) and a fixed tilted start is played with them, not the default
    +1-per-step task from a random start."""
    pytest.importorskip("imageio")
    run = tmp_path / "run"
    kwargs = '{"sutton_barto_reward": true, "reset_low": 0.15, "reset_high": 0.15}'
    assert main(["train", "--run-dir", str(run), "--generations", "1", "--no-progress", "--set", "env.id=CartPole-v1",
                 "--set", "policy.kind=linear", "--set", "algorithm.popsize=2", "--set", "env.episodes=1",
                 "--set", "evaluator.kind=pipelined", "--set", f"env.kwargs={kwargs}"]) == 0
    capfd.readouterr()
    assert main(["play", str(run), "--video", str(tmp_path / "p.gif"), "--max-steps", "400"]) == 0
    m = re.search(r"return (\S+) over (\d+) steps", capfd.readouterr().out)
    # a pole starting at 0.15 rad falls within a few dozen steps whatever the linear policy does
    assert float(m.group(1)) == -1.0 and int(m.group(2)) < 400


def test_gymnasium_twin_maps_every_in_graph_option():
    import gymnasium as gym

    from tfevo.envs import gymnasium_twin

    assert gymnasium_twin("Pendulum-v1", {"g": 2.5, "x_init": 0.1, "y_init": 0.2, "max_episode_steps": 9}) == (
        {"g": 2.5, "max_episode_steps": 9}, {"x_init": 0.1, "y_init": 0.2})
    assert gymnasium_twin("CartPole-v1", {"max_episode_steps": 0}) == ({}, {})  # tfevo's "no limit"
    make_kwargs, options = gymnasium_twin("MountainCar-v0", {"goal_velocity": 0.01, "reset_low": -0.5,
                                                             "reset_high": -0.45})
    env = gym.make("MountainCar-v0", **make_kwargs)
    obs, _ = env.reset(seed=3, options=options)
    assert env.unwrapped.goal_velocity == 0.01 and -0.5 <= obs[0] <= -0.45
    # engine options of the MuJoCo tasks do not change the task; other ids' kwargs are gym.make's
    assert gymnasium_twin("Hopper-v5", {"num_threads": 2, "backend": "threads"}) == ({}, {})
    assert gymnasium_twin("LunarLander-v3", {"continuous": True, "asynchronous": True}) == ({"continuous": True}, {})


@pytest.mark.parametrize("command", [["play", "--video", "{no}/v.gif"], ["play", "--video", "{d}"],
                                     ["plot", "--out", "{no}/c.png"], ["plot", "--out", "{d}"]])
def test_an_output_file_that_cannot_be_written_is_refused_before_any_work(command, tmp_path, capsys):
    """It was a FileNotFoundError traceback, for play after the whole episode had been played."""
    from tfevo.cli import main

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")  # never read: the output is checked first
    (tmp_path / "d.gif").mkdir()
    argv = [a.format(no=tmp_path / "no", d=tmp_path / "d.gif") for a in command]
    assert main([argv[0], str(run), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert f"{argv[1]} " in err and ("folder" in err and "does not exist" in err or "is a directory" in err), err
