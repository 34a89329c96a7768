package io.xinserve.client;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.grpc.ManagedChannel;
import io.grpc.Server;
import io.grpc.inprocess.InProcessChannelBuilder;
import io.grpc.inprocess.InProcessServerBuilder;
import io.grpc.stub.StreamObserver;
import io.grpc.testing.TlsTesting;
import io.xinserve.v1.GetServerInfoRequest;
import io.xinserve.v1.GetServerInfoResponse;
import io.xinserve.v1.ServerServiceGrpc;
import java.io.InputStream;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The client without its optional BouncyCastle dependency (surefire execution {@code
 * without-bouncycastle} leaves it off the class path): calls work, and the attestation channel
 * binding, the one part that needs SM3, fails with an error naming the missing dependency.
 */
class WithoutBouncyCastleTest {
  private static final String NAMED = "org.bouncycastle:bcprov-jdk18on";

  @Test
  void bouncyCastleIsNotOnThisClassPath() {
    assertThatThrownBy(() -> Class.forName("org.bouncycastle.crypto.digests.SM3Digest"))
        .isInstanceOf(ClassNotFoundException.class);
  }

  @Test
  void callsWorkWithoutBouncyCastle() throws Exception {
    String name = InProcessServerBuilder.generateName();
    Server server =
        InProcessServerBuilder.forName(name)
            .addService(
                new ServerServiceGrpc.ServerServiceImplBase() {
                  @Override
                  public void getServerInfo(
                      GetServerInfoRequest request, StreamObserver<GetServerInfoResponse> out) {
                    out.onNext(GetServerInfoResponse.newBuilder().setServerVersion("v").build());
                    out.onCompleted();
                  }
                })
            .build()
            .start();
    ManagedChannel channel = InProcessChannelBuilder.forName(name).build();
    try (XinserveClient c = XinserveClient.builder().channel(channel).build()) {
      assertThat(c.serverInfo().getServerVersion()).isEqualTo("v");
    } finally {
      channel.shutdownNow().awaitTermination(10, TimeUnit.SECONDS);
      server.shutdownNow().awaitTermination(10, TimeUnit.SECONDS);
    }
  }

  @Test
  void theChannelBindingNamesTheMissingDependency() throws Exception {
    X509Certificate cert;
    try (InputStream in = TlsTesting.loadCert("server1.pem")) {
      cert = (X509Certificate) CertificateFactory.getInstance("X.509").generateCertificate(in);
    }
    assertThatThrownBy(() -> ChannelBinding.spkiSha256(cert))
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining(NAMED);
    assertThatThrownBy(() -> ChannelBinding.reportData(new byte[16], new byte[32], List.of()))
        .isInstanceOf(IllegalStateException.class)
        .hasMessageContaining(NAMED)
        .hasMessageContaining("SM3");
  }
}
