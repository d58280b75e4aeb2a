package org.apache.flink.metrics.prometheus;

import java.util.Properties;
import org.apache.flink.metrics.reporter.MetricReporter;
import org.apache.flink.metrics.reporter.MetricReporterFactory;
import org.apache.flink.util.NetUtils;

/**
 * Factory of {@link LoopbackPrometheusReporter}: {@code metrics.reporter.NAME.factory.class} set to this class,
 * with the options {@code host} (default 127.0.0.1) and {@code port} (a port or a range such as 9250-9260,
 * default 9249; the first free one is taken).
 */
public class LoopbackPrometheusReporterFactory implements MetricReporterFactory {
  @Override
  public MetricReporter createMetricReporter(Properties properties) {
    String host = properties.getProperty("host", "127.0.0.1");
    String ports = properties.getProperty("port", "9249");
    return new LoopbackPrometheusReporter(host, NetUtils.getPortRangeFromString(ports));
  }
}
