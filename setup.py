"""Packaging for the LDP-on-Beam project.

Installs the four top-level packages (``ldp``, ``transforms``, ``pipelines``, ``schemas``) plus
``bench`` and ``experiments`` so that remote Beam workers (Flink, Dataflow) get the same code:
pass ``--setup_file ./setup.py`` to a pipeline launched on a remote runner.
"""

from setuptools import find_packages, setup

RUNTIME = [
    "apache-beam==2.77.0",
    "numpy>=1.26,<2.5",
    "scipy>=1.11,<1.19",
    "fastavro>=1.9,<2",
    "threadpoolctl>=3.1,<4",
]

EXTRAS = {
    "test": ["pytest>=8,<10", "ruff>=0.6", "matplotlib>=3.8,<4"],
    "bench": ["matplotlib>=3.8,<4"],
    "pubsub": ["google-cloud-pubsub>=2.20,<3"],
}

setup(
    name="ldp-beam",
    version="0.1.0",
    description="Local differential privacy analytics on Apache Beam",
    python_requires=">=3.10",
    packages=find_packages(
        include=["ldp*", "transforms*", "pipelines*", "schemas*", "bench*", "experiments*"]
    ),
    package_data={"schemas": ["*.avsc"]},
    include_package_data=True,
    install_requires=RUNTIME,
    extras_require=EXTRAS,
)
