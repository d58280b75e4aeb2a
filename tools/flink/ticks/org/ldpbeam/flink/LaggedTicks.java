/*
 * Watch ticks for ldp-beam's directory-streaming jobs on Flink, as a Java source the Flink runner runs and
 * checkpoints natively (docs/flink.md, "Failover").
 *
 * The Python watch (transforms/io.py WatchReportFiles) needs a clock: an element every watch interval, and a
 * watermark that follows the wall clock a fixed lag behind. PeriodicImpulse gives both, but it is a
 * splittable DoFn the portable Flink runner never checkpoints mid-bundle (apache/beam#20979), so a watched
 * job cannot complete a checkpoint while its watch runs. This transform is Beam's own unbounded
 * CountingSource read as a primitive Read (the expansion service runs with the use_deprecated_read
 * experiment), which the Flink runner translates into a Flink source of its own: its position (a counter
 * mark) is part of every checkpoint, and its watermark is the timestamp function below.
 *
 * Python side: transforms/flink_ticks.py (URN, payload fields period_ms and lag_ms).
 */
package org.ldpbeam.flink;

import java.util.Collections;
import java.util.Map;
import org.apache.beam.sdk.expansion.ExternalTransformRegistrar;
import org.apache.beam.sdk.io.GenerateSequence;
import org.apache.beam.sdk.transforms.ExternalTransformBuilder;
import org.apache.beam.sdk.transforms.PTransform;
import org.apache.beam.sdk.transforms.SerializableFunction;
import org.apache.beam.sdk.values.PBegin;
import org.apache.beam.sdk.values.PCollection;
import org.joda.time.Duration;
import org.joda.time.Instant;

/** Registers {@code beam:external:ldp:lagged_ticks:v1} with Beam's Java expansion service. */
public class LaggedTicks implements ExternalTransformRegistrar {
  public static final String URN = "beam:external:ldp:lagged_ticks:v1";

  @Override
  public Map<String, ExternalTransformBuilder<?, ?, ?>> knownBuilderInstances() {
    return Collections.singletonMap(URN, new Builder());
  }

  /** The payload: {@code period_ms} (> 0) between ticks and {@code lag_ms} (>= 0) of watermark lag. */
  public static class Configuration {
    private Long periodMs;
    private Long lagMs;

    public void setPeriodMs(Long periodMs) {
      this.periodMs = periodMs;
    }

    public void setLagMs(Long lagMs) {
      this.lagMs = lagMs;
    }
  }

  /** Builds the transform from the payload, refusing a missing or out-of-range field by name. */
  public static class Builder
      implements ExternalTransformBuilder<Configuration, PBegin, PCollection<Long>> {
    @Override
    public PTransform<PBegin, PCollection<Long>> buildExternal(Configuration config) {
      if (config.periodMs == null || config.periodMs <= 0) {
        throw new IllegalArgumentException("period_ms must be a positive number of ms, got " + config.periodMs);
      }
      if (config.lagMs == null || config.lagMs < 0) {
        throw new IllegalArgumentException("lag_ms must be >= 0 ms, got " + config.lagMs);
      }
      return new Ticks(config.periodMs, config.lagMs);
    }
  }

  /** One tick per period (a counter), timestamped and watermarked {@code lag} behind the wall clock. */
  static class Ticks extends PTransform<PBegin, PCollection<Long>> {
    private final long periodMs;
    private final long lagMs;

    Ticks(long periodMs, long lagMs) {
      this.periodMs = periodMs;
      this.lagMs = lagMs;
    }

    @Override
    public PCollection<Long> expand(PBegin input) {
      return input.apply(
          "Ticks",
          GenerateSequence.from(0)
              .withRate(1, Duration.millis(periodMs))
              .withTimestampFn(new LaggedNow(lagMs)));
    }
  }

  /**
   * The wall clock minus the lag, whatever the counter: the reader applies it to each element and, at
   * every call, for its watermark, so the watermark follows the clock between ticks too.
   */
  static class LaggedNow implements SerializableFunction<Long, Instant> {
    private final long lagMs;

    LaggedNow(long lagMs) {
      this.lagMs = lagMs;
    }

    @Override
    public Instant apply(Long counter) {
      return Instant.now().minus(Duration.millis(lagMs));
    }
  }
}
