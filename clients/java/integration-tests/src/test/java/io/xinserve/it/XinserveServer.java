package io.xinserve.it;

import io.grpc.health.v1.HealthCheckResponse.ServingStatus;
import io.xinserve.client.XinserveClient;
import io.xinserve.client.errors.XinserveException;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * One live {@code xinserve serve} process, started from the repository root with {@code uv run
 * --no-sync}, stopped with SIGTERM. Its output goes to {@code <work>/<name>.log}.
 */
final class XinserveServer implements AutoCloseable {
  static final Duration STARTUP_TIMEOUT = Duration.ofSeconds(
      Long.getLong("xinserve.it.startup-timeout-seconds", 600));

  final String name;
  final int port;
  final Path log;
  private final Process process;

  private XinserveServer(String name, int port, Path log, Process process) {
    this.name = name;
    this.port = port;
    this.log = log;
    this.process = process;
  }

  /**
   * Starts a server.
   *
   * @param name a name for its log and data directory
   * @param work the tests' work directory
   * @param port the plaintext listener's port (also used for the health wait)
   * @param extraArgs further flags of {@code xinserve serve}
   */
  static XinserveServer start(String name, Path work, int port, List<String> extraArgs)
      throws IOException {
    Path repoRoot = Path.of(System.getProperty("xinserve.repo.root", "../../..")).toAbsolutePath().normalize();
    Path dataDir = work.resolve(name + "-data");
    Files.createDirectories(dataDir);
    Path log = work.resolve(name + ".log");
    // -Dxinserve.it.server-command overrides the launcher (e.g. a venv's python -m service.cli)
    String launcher = System.getProperty("xinserve.it.server-command", "uv run --no-sync xinserve");
    List<String> cmd = new ArrayList<>(List.of(launcher.trim().split("\\s+")));
    cmd.addAll(List.of("serve",
        "--listen", "127.0.0.1:" + port, "--data-dir", dataDir.toString(), "--no-metrics", "--drain-grace-seconds", "5"));
    cmd.addAll(extraArgs);
    ProcessBuilder pb = new ProcessBuilder(cmd)
        .directory(repoRoot.toFile())
        .redirectErrorStream(true)
        .redirectOutput(log.toFile());
    pb.environment().putIfAbsent("UV_LINK_MODE", "copy");
    Files.writeString(log, "", StandardCharsets.UTF_8);
    Process p = pb.start();
    return new XinserveServer(name, port, log, p);
  }

  /** Waits until grpc.health.v1 says SERVING for "" and the inference service. */
  void awaitServing(XinserveClient probe) throws IOException, InterruptedException {
    long deadline = System.nanoTime() + STARTUP_TIMEOUT.toNanos();
    String last = "no answer";
    while (System.nanoTime() < deadline) {
      if (!process.isAlive()) {
        throw new IllegalStateException("xinserve server '" + name + "' exited with "
            + process.exitValue() + " during start-up; its log:\n" + tail());
      }
      try {
        if (probe.checkHealth("", Duration.ofSeconds(2)) == ServingStatus.SERVING
            && probe.checkHealth("xinserve.v1.InferenceService", Duration.ofSeconds(2))
                == ServingStatus.SERVING) {
          return;
        }
        last = "NOT_SERVING";
      } catch (XinserveException e) {
        last = e.code().name();
      }
      Thread.sleep(500);
    }
    throw new IllegalStateException("xinserve server '" + name + "' not SERVING after "
        + STARTUP_TIMEOUT.toSeconds() + " s (last: " + last + "); its log:\n" + tail());
  }

  String tail() {
    try {
      List<String> lines = Files.readAllLines(log, StandardCharsets.UTF_8);
      return String.join("\n", lines.subList(Math.max(0, lines.size() - 60), lines.size()));
    } catch (IOException e) {
      return "(log unreadable: " + e + ")";
    }
  }

  boolean isAlive() {
    return process.isAlive();
  }

  /** SIGTERM, then wait up to 60 s for a clean exit; SIGKILL as a last resort. */
  @Override
  public void close() throws InterruptedException {
    if (!process.isAlive()) {
      return;
    }
    process.destroy(); // SIGTERM on Unix
    if (!process.waitFor(60, TimeUnit.SECONDS)) {
      process.descendants().forEach(ProcessHandle::destroyForcibly);
      process.destroyForcibly();
      process.waitFor(10, TimeUnit.SECONDS);
    }
  }

  int exitValue() {
    return process.exitValue();
  }

  static int freePort() throws IOException {
    try (ServerSocket s = new ServerSocket(0)) {
      s.setReuseAddress(true);
      return s.getLocalPort();
    }
  }
}
