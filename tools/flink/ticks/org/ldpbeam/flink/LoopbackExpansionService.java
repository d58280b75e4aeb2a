/*
 * Beam's Java expansion service, bound to one address (127.0.0.1 by default) rather than every interface as
 * Beam's own ExpansionService main does. Arguments: PORT [HOST] -- [pipeline options...]; ldp-beam starts it
 * with --experiments=use_deprecated_read so that Read transforms expand to the primitive the Flink runner
 * translates natively (LaggedTicks). Stopped by its PID (tools/flink/cluster.sh).
 */
package org.ldpbeam.flink;

import java.util.Arrays;
import org.apache.beam.sdk.expansion.service.ExpansionServer;
import org.apache.beam.sdk.expansion.service.ExpansionService;
import org.apache.beam.sdk.options.PipelineOptions;
import org.apache.beam.sdk.options.PipelineOptionsFactory;

public final class LoopbackExpansionService {
  private LoopbackExpansionService() {}

  public static void main(String[] args) throws Exception {
    if (args.length < 1) {
      System.err.println("usage: LoopbackExpansionService PORT [HOST] [-- pipeline options]");
      System.exit(2);
    }
    int port = Integer.parseInt(args[0]);
    String host = "127.0.0.1";
    int rest = 1;
    if (args.length > 1 && !args[1].startsWith("-")) {
      host = args[1];
      rest = 2;
    }
    if (args.length > rest && args[rest].equals("--")) {
      rest++;
    }
    PipelineOptions options =
        PipelineOptionsFactory.fromArgs(Arrays.copyOfRange(args, rest, args.length)).create();
    ExpansionServer server = ExpansionServer.create(new ExpansionService(options), host, port);
    System.out.println("expansion service listening on " + server.getHost() + ":" + server.getPort());
    System.out.flush();
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      try {
        server.close();
      } catch (Exception e) {
        // exiting anyway
      }
    }));
    Thread.currentThread().join();
  }
}
