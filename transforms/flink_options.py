"""The Flink runner's checkpointing and restart options, declared to the Python SDK.

Beam's Java ``FlinkPipelineOptions`` (in the Flink job server) has options that Python's
``FlinkRunnerOptions`` does not declare: ``checkpointingInterval``, ``checkpointingMode``, ... A flag
nobody in Python declares is refused by ``pipelines.cli`` (and dropped by ``PipelineOptions``), so it
never reaches the job server, and Beam's Flink runner then takes a streaming job for an unchecked one
even when the cluster's configuration checkpoints it (it shuts its sources down as soon as they are idle,
among other things). Declaring them here makes ``--checkpointing_interval=1000`` travel to the job
server, which maps each ``snake_case`` name to the Java ``camelCase`` option of the same name.

Only the options given on the command line are sent (no defaults here: the runner's own defaults apply
to the rest).
"""

from __future__ import annotations

import argparse

from apache_beam.options.pipeline_options import PipelineOptions

CHECKPOINTING_MODES = ("EXACTLY_ONCE", "AT_LEAST_ONCE")


class FlinkCheckpointOptions(PipelineOptions):
    """``--checkpointing_interval`` and the other checkpoint / restart options of Beam's Flink runner."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--checkpointing_interval",
            type=int,
            default=None,
            help="Flink runner: checkpoint interval of a streaming job, ms (unset or -1: not checkpointed "
            "by Beam's runner)",
        )
        parser.add_argument(
            "--checkpointing_mode",
            choices=CHECKPOINTING_MODES,
            default=None,
            help="Flink runner: checkpointing mode (the runner's default: EXACTLY_ONCE)",
        )
        parser.add_argument(
            "--checkpoint_timeout_millis",
            type=int,
            default=None,
            help="Flink runner: a checkpoint not completed in this many ms is discarded",
        )
        parser.add_argument(
            "--min_pause_between_checkpoints",
            type=int,
            default=None,
            help="Flink runner: ms from the end of one checkpoint to the start of the next",
        )
        parser.add_argument(
            "--num_concurrent_checkpoints",
            type=int,
            default=None,
            help="Flink runner: checkpoints that may be in progress at once",
        )
        parser.add_argument(
            "--shutdown_sources_after_idle_ms",
            type=int,
            default=None,
            help="Flink runner: ms after which an idle source shuts down (the runner's default: never "
            "when checkpointing, at once otherwise)",
        )
        parser.add_argument(
            "--finish_bundle_before_checkpointing",
            action="store_true",
            default=None,
            help="Flink runner: finish the running bundle before a checkpoint instead of buffering its "
            "output in the checkpoint",
        )
        parser.add_argument(
            "--number_of_execution_retries",
            type=int,
            default=None,
            help="Flink runner: times a failed job is restarted (unset: the cluster's restart strategy)",
        )
        parser.add_argument(
            "--execution_retry_delay",
            type=int,
            default=None,
            help="Flink runner: ms between a failure and the restart",
        )
