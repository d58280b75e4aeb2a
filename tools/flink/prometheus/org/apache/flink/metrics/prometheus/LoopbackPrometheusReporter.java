package org.apache.flink.metrics.prometheus;

import io.prometheus.client.exporter.HTTPServer;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.Iterator;

/**
 * Flink's Prometheus reporter (its metric names, labels and types: {@link AbstractPrometheusReporter} from
 * flink-metrics-prometheus) serving its scrape endpoint on one host address, 127.0.0.1 by default. Flink's
 * own {@code PrometheusReporter} binds every interface, which the project's services never do.
 *
 * <p>It lives in Flink's package because the reporter's collector registry is package-private there.
 */
public class LoopbackPrometheusReporter extends AbstractPrometheusReporter {
  private final HTTPServer server;
  private final int port;

  LoopbackPrometheusReporter(String host, Iterator<Integer> ports) {
    HTTPServer bound = null;
    int boundPort = -1;
    IOException last = null;
    while (bound == null && ports.hasNext()) {
      int p = ports.next();
      try {
        bound = new HTTPServer(new InetSocketAddress(host, p), registry);
        boundPort = p;
      } catch (IOException e) {
        last = e;
      }
    }
    if (bound == null) {
      throw new IllegalStateException("no free port for the Prometheus endpoint on " + host, last);
    }
    server = bound;
    port = boundPort;
    log.info("Prometheus endpoint on http://{}:{}/metrics", host, port);
  }

  int getPort() {
    return port;
  }

  @Override
  public void close() {
    server.stop();
    super.close();
  }
}
