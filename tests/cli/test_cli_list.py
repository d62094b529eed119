"""`tfevo list`: whole plain-text sentences, every policy a config can name, natural order."""

import re

from tfevo import registry
from tfevo.cli import main
from tfevo.training.config import PolicyConfig


def _entries(out):
    """{section: [(name, description)]} from the printed listing (wrapped lines joined)."""
    sections, current = {}, None
    for line in out.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = sections.setdefault(line[:-1], [])
        elif line.startswith(" " * 31) and current:
            name, desc = current[-1]
            current[-1] = (name, desc + " " + line.strip())
        elif line.startswith("  ") and current is not None:
            name, _, desc = line.strip().partition(" ")
            current.append((name, desc.strip()))
    return sections


def test_list_shows_whole_plain_sentences_in_natural_order(capsys):
    assert main(["list"]) == 0
    sections = _entries(capsys.readouterr().out)
    assert set(sections) == {"algorithms", "environments", "problems", "policies", "evaluators"}
    for section, rows in sections.items():
        for name, desc in rows:
            assert desc, name
            assert "``" not in desc and not re.search(r":[a-z]+:`", desc) and "`" not in desc, (name, desc)
    # descriptions end where a sentence ends (the old listing cut them at the end of a docstring line)
    for kind in registry.KINDS:
        for name, obj in registry._REGISTRY[kind].items():
            doc = (getattr(obj, "__doc__", None) or "").strip()
            para = " ".join(l.strip() for l in doc.split("\n\n")[0].splitlines())
            desc, whole = registry._DOCS[kind][name], registry.plain_text(para)
            if desc == registry.summary(doc) and desc != whole:  # a sentence of the docstring, never a cut
                assert desc[-1] in ".!?" and whole.startswith(desc + " "), (kind, name, desc)
    bipop = dict(sections["algorithms"])["bipop_cma_es"]
    assert bipop.split(" Config: ")[0].endswith("small step size."), bipop  # then what it evolves
    policies = [n for n, _ in sections["policies"]]
    for kind in PolicyConfig.model_fields["kind"].annotation.__args__:  # every policy.kind a config takes
        assert kind in policies
    problems = [n for n, _ in sections["problems"]]
    bbob = [n for n in problems if n.startswith("bbob_f")]
    assert bbob == [f"bbob_f{i}" for i in range(1, 25)]
    # every problem says whether a config's [problem] can name it (only the QD tasks can)
    for name, desc in sections["problems"]:
        qd = name.endswith(("_qd", "_linproj"))
        assert ("Config: [problem] of algorithm map_elites." in desc) == qd, (name, desc)
        assert ("not a config [problem]" in desc) == (not qd), (name, desc)
    envs = [n for n, _ in sections["environments"]]
    mujoco = dict(sections["environments"])["Swimmer-v5"]
    assert "MujocoVectorEnv" not in mujoco or mujoco.endswith("."), mujoco
    assert envs.index("CartPole-v1") < envs.index("ALE/<Game>-v5")


def test_plain_text_and_summary():
    assert registry.plain_text("uses ``x`` and :class:`~tfevo.nn.Policy` or :func:`mlp`") == \
        "uses x and tfevo.nn.Policy or mlp"
    assert registry.summary("First line\n  goes on. Second sentence.\n\nMore.") == "First line goes on."
    assert registry.summary("Mania et al. 2018 method, e.g. CartPole. Next.") == \
        "Mania et al. 2018 method, e.g. CartPole."
    assert sorted(["f10", "f2", "f1", "g"], key=registry.natural_key) == ["f1", "f2", "f10", "g"]
