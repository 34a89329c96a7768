package io.xinserve.client;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.grpc.Server;
import io.grpc.Status;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import io.xinserve.client.errors.FailedPreconditionException;
import io.xinserve.client.errors.IncompatibleServerException;
import io.xinserve.client.errors.UnavailableException;
import io.xinserve.v1.GetServerInfoRequest;
import io.xinserve.v1.GetServerInfoResponse;
import io.xinserve.v1.ServerServiceGrpc;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/** {@link XinserveClient#checkCompatibility()} against an in-process ServerService. */
class CompatibilityCheckTest {
  static final Path ROOT = Path.of(System.getProperty("xinserve.repo.root", "../../.."));

  static Server serve(String name, int minClientRevision) throws Exception {
    return InProcessServerBuilder.forName(name)
        .directExecutor()
        .addService(
            new ServerServiceGrpc.ServerServiceImplBase() {
              @Override
              public void getServerInfo(
                  GetServerInfoRequest request, StreamObserver<GetServerInfoResponse> out) {
                out.onNext(
                    GetServerInfoResponse.newBuilder()
                        .setServerVersion("test")
                        .setSchemaRevision(XinserveClient.SCHEMA_REVISION + 1)
                        .setMinClientRevision(minClientRevision)
                        .build());
                out.onCompleted();
              }
            })
        .build()
        .start();
  }

  static XinserveClient client(String name) {
    return XinserveClient.builder()
        .channelBuilder(InProcessChannelBuilder.forName(name).directExecutor())
        .retryPolicy(RetryPolicy.none())
        .build();
  }

  @Test
  void aServerThatStillSupportsThisRevisionPasses() throws Exception {
    String name = InProcessServerBuilder.generateName();
    Server server = serve(name, XinserveClient.SCHEMA_REVISION);
    try (XinserveClient client = client(name)) {
      assertThat(client.checkCompatibility().getServerVersion()).isEqualTo("test");
    } finally {
      server.shutdownNow();
    }
  }

  @Test
  void aServerThatNeedsANewerClientIsRefused() throws Exception {
    String name = InProcessServerBuilder.generateName();
    Server server = serve(name, XinserveClient.SCHEMA_REVISION + 1);
    try (XinserveClient client = client(name)) {
      assertThatThrownBy(client::checkCompatibility)
          .isInstanceOf(IncompatibleServerException.class)
          .isInstanceOf(FailedPreconditionException.class)
          .hasMessageContaining("schema revision >= " + (XinserveClient.SCHEMA_REVISION + 1))
          .hasMessageContaining("upgrade xinserve-client")
          .satisfies(
              e ->
                  assertThat(((IncompatibleServerException) e).code())
                      .isEqualTo(Status.Code.FAILED_PRECONDITION));
    } finally {
      server.shutdownNow();
    }
  }

  @Test
  void aFailedServerInfoCallIsThrownAsItsStatus() {
    try (XinserveClient client = client(InProcessServerBuilder.generateName())) {
      assertThatThrownBy(client::checkCompatibility).isInstanceOf(UnavailableException.class);
    }
  }

  static int revision(String path) throws Exception {
    Path file = ROOT.resolve(path);
    assertThat(file).as("run from clients/java/client or set -Dxinserve.repo.root").exists();
    Matcher m =
        Pattern.compile("(?m)^SCHEMA_REVISION = (\\d+)$")
            .matcher(Files.readString(file, StandardCharsets.UTF_8));
    assertThat(m.find()).as("SCHEMA_REVISION in %s", path).isTrue();
    return Integer.parseInt(m.group(1));
  }

  @Test
  void theRevisionIsThePythonClientsAndTheServers() throws Exception {
    assertThat(XinserveClient.SCHEMA_REVISION)
        .isEqualTo(revision("clients/python/xinserve_client/_common.py"))
        .isEqualTo(revision("service/frontends/grpc/server_servicer.py"));
  }
}
