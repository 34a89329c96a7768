package io.xinserve.client;

import java.io.IOException;
import java.io.InputStream;
import java.util.Optional;
import java.util.Properties;

/**
 * Warns once, when the first client is built, if the grpc-java on the class path is older than the
 * one this client was built and tested with (e.g. an older version pinned by another BOM): the
 * client may then fail at run time with a {@code NoSuchMethodError} deep in gRPC. A warning, not a
 * refusal, because a lower patch release usually works.
 */
final class GrpcRuntimeCheck {
  private static volatile boolean checked;
  private static final System.Logger LOG = System.getLogger(XinserveClient.class.getName());

  private GrpcRuntimeCheck() {}

  static void warnIfOlder() {
    if (!checked) {
      checked = true;
      String minimum = builtWith();
      warning(runtimeVersion(), minimum).ifPresent(m -> LOG.log(System.Logger.Level.WARNING, m));
    }
  }

  /**
   * @param runtime grpc-java's version on the class path ({@code "1.80.0"}), or {@code null} if
   *     unknown
   * @param minimum the version this client was built with
   * @return the warning if {@code runtime} is older than {@code minimum} (compared as numbers,
   *     major.minor.patch); empty if not, or if either is unknown
   */
  static Optional<String> warning(String runtime, String minimum) {
    int[] r = parse(runtime);
    int[] m = parse(minimum);
    if (r == null || m == null) {
      return Optional.empty();
    }
    for (int i = 0; i < 3; i++) {
      if (r[i] != m[i]) {
        if (r[i] > m[i]) {
          return Optional.empty();
        }
        return Optional.of(
            "xinserve-client was built and tested with grpc-java "
                + minimum
                + " but the class path has grpc-java "
                + runtime
                + "; calls may fail with NoSuchMethodError. Import io.xinserve:xinserve-bom"
                + " before other BOMs (see docs/java.md, Version alignment).");
      }
    }
    return Optional.empty();
  }

  /** @return {@code io.grpc.internal.GrpcUtil.IMPLEMENTATION_VERSION}, read at run time, or null */
  static String runtimeVersion() {
    try {
      // reflection: a compile-time constant would be inlined with the build's version
      Object v = Class.forName("io.grpc.internal.GrpcUtil").getField("IMPLEMENTATION_VERSION").get(null);
      return v instanceof String s ? s : null;
    } catch (ReflectiveOperationException | LinkageError e) {
      return null;
    }
  }

  static String builtWith() {
    Properties p = new Properties();
    try (InputStream in = GrpcRuntimeCheck.class.getResourceAsStream("versions.properties")) {
      if (in != null) {
        p.load(in);
      }
    } catch (IOException e) {
      return null;
    }
    return p.getProperty("grpc.version");
  }

  private static int[] parse(String v) {
    if (v == null) {
      return null;
    }
    String[] parts = v.split("[.-]");
    if (parts.length < 3) {
      return null;
    }
    int[] n = new int[3];
    try {
      for (int i = 0; i < 3; i++) {
        n[i] = Integer.parseInt(parts[i]);
      }
    } catch (NumberFormatException e) {
      return null;
    }
    return n;
  }
}
