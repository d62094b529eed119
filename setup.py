"""tfevo: population-batched neuroevolution for TensorFlow/Keras."""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
README = (HERE / "README.md").read_text(encoding="utf-8") if (HERE / "README.md").exists() else ""

INSTALL_REQUIRES = [
    "tensorflow>=2.16",
    "tensorflow-probability>=0.24",
    "tf-keras>=2.16",  # tensorflow-probability imports it
    "gymnasium>=1.1",  # vector envs with autoreset disabled
    "ale-py>=0.12",  # Atari ROMs ship inside the wheel; native vector env
    "mujoco>=3.2",
    "numpy>=1.23",
    "tensorboard>=2.16",  # tf.summary needs it (TensorFlow no longer pulls it in)
    "tqdm>=4.60",  # progress bars
    "matplotlib>=3.6",  # learning curves, archive heatmaps
    "pyyaml>=6.0",  # YAML configs (TOML uses tomllib / tomli)
    "pydantic>=2.0",  # config validation with errors that name the field
    "tomli>=2.0; python_version < '3.11'",
    "sympy>=1.12",  # expression export / simplification (NEAT, GP)
    "scikit-learn>=1.3",  # classification data sets shipped with it, estimator API
    "imageio>=2.30",  # videos from `tfevo play`
    "pygame>=2.1",  # Gymnasium's classic-control rendering for `tfevo play`
    "imageio-ffmpeg>=0.4",
]

DOCS = ["mkdocs>=1.6", "mkdocstrings[python]>=0.26"]  # the docs site; its strict build is a test

EXTRAS = {
    "docs": DOCS,
    "test": ["pytest>=7", "pytest-xdist>=3", "cma>=3.3", "neat-python>=0.92", "coco-experiment>=2.6",
             "ribs>=0.7", "gplearn>=0.4", *DOCS],  # pycma, neat-python, COCO, pyribs and gplearn are the references tests compare with
    "bench": [
        "cma>=3.3", "jax>=0.4.30", "evosax>=0.1.6", "neat-python>=0.92",
        "gplearn>=0.4", "deap>=1.4", "ribs>=0.7", "coco-experiment>=2.6",
    ],
}
EXTRAS["all"] = sorted(set(sum(EXTRAS.values(), [])))

setup(
    name="tfevo",
    version="0.1.0",
    description="Population-batched neuroevolution for TensorFlow/Keras: ES, GA, NEAT, GP, MAP-Elites",
    long_description=README,
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["tfevo", "tfevo.*"]) + ["tfevo.custom_ops_src"],
    package_dir={"tfevo.custom_ops_src": "custom_ops"},
    package_data={"tfevo.custom_ops_src": ["*.cc", "*.h"], "tfevo": ["configs/*.toml", "configs/*.yaml"]},
    include_package_data=True,
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["tfevo=tfevo.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
