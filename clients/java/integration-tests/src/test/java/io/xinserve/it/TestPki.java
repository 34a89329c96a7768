package io.xinserve.it;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A throw-away PKI made with the {@code openssl} CLI: a CA, a server certificate for 127.0.0.1 and
 * localhost, a client certificate (CN=it-client), and an unrelated CA to show refusal.
 */
final class TestPki {
  final Path dir;
  final Path caCert;
  final Path serverCert;
  final Path serverKey;
  final Path clientCert;
  final Path clientKey;
  final Path otherCaCert;

  TestPki(Path dir) throws IOException, InterruptedException {
    this.dir = dir;
    Files.createDirectories(dir);
    caCert = dir.resolve("ca.pem");
    serverCert = dir.resolve("server.pem");
    serverKey = dir.resolve("server.key");
    clientCert = dir.resolve("client.pem");
    clientKey = dir.resolve("client.key");
    otherCaCert = dir.resolve("other-ca.pem");
    ca("ca", "/CN=xinserve IT CA");
    ca("other-ca", "/CN=some other CA");
    leaf("server", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
    leaf("client", "/O=xinserve/CN=it-client", "extendedKeyUsage=clientAuth\n");
  }

  private void ca(String name, String subject) throws IOException, InterruptedException {
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", name + ".key", "-out", name + ".pem", "-days", "2", "-subj", subject,
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign");
  }

  private void leaf(String name, String subject, String ext) throws IOException, InterruptedException {
    Files.writeString(dir.resolve(name + ".ext"), ext, StandardCharsets.US_ASCII);
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", name + ".key", "-out", name + ".csr", "-subj", subject);
    openssl("x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", name + ".pem", "-days", "2", "-extfile", name + ".ext");
  }

  private void openssl(String... args) throws IOException, InterruptedException {
    List<String> cmd = new ArrayList<>();
    cmd.add("openssl");
    cmd.addAll(List.of(args));
    Process p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) {
      throw new IOException("openssl " + String.join(" ", args) + " failed:\n" + out);
    }
  }
}
