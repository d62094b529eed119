"""tests/ mirrors tfevo/: one folder per subpackage, kernel-vs-reference parity in tests/kernels/."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_each_test_folder_names_a_subpackage_or_the_kernels():
    packages = {p.name for p in (ROOT / "tfevo").iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert folders - packages <= {"kernels"}, sorted(folders - packages - {"kernels"})


def test_subpackage_tests_sit_in_their_folder():
    packages = {p.name for p in (ROOT / "tfevo").iterdir() if (p / "__init__.py").is_file()}
    flat = [p.name for p in (ROOT / "tests").glob("test_*.py")
            if any(p.stem.startswith(f"test_{pkg}") for pkg in packages)]
    assert not flat, f"move these into tests/<subpackage>/: {flat}"
