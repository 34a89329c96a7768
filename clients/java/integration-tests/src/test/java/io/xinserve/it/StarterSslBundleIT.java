package io.xinserve.it;

import static io.xinserve.it.LiveServers.TINY;
import static org.assertj.core.api.Assertions.assertThat;

import io.xinserve.client.XinserveClient;
import io.xinserve.spring.boot.XinserveClientAutoConfiguration;
import io.xinserve.spring.boot.XinserveHealthAutoConfiguration;
import io.xinserve.spring.boot.XinserveClients;
import io.xinserve.v1.Model;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.actuate.health.HealthContributor;
import org.springframework.boot.actuate.health.HealthIndicator;
import org.springframework.boot.actuate.health.Status;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.autoconfigure.ssl.SslAutoConfiguration;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/** The starter against the live server: mTLS through a Spring PEM SSL bundle, a token, health. */
@ExtendWith(XinserveServerExtension.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class StarterSslBundleIT {
  private final LiveServers servers = LiveServers.get();
  private final ApplicationContextRunner runner = new ApplicationContextRunner()
      .withConfiguration(
          AutoConfigurations.of(
              SslAutoConfiguration.class,
              XinserveClientAutoConfiguration.class,
              XinserveHealthAutoConfiguration.class));

  @Test
  void mutualTlsThroughAnSslBundleAndNamedTokenClient() {
    runner
        .withPropertyValues(
            "spring.ssl.bundle.pem.xinserve.truststore.certificate=file:" + servers.pki.caCert,
            "spring.ssl.bundle.pem.xinserve.keystore.certificate=file:" + servers.pki.clientCert,
            "spring.ssl.bundle.pem.xinserve.keystore.private-key=file:" + servers.pki.clientKey,
            "xinserve.client.address=dns:///localhost:" + servers.tlsPort,
            "xinserve.client.ssl.bundle=xinserve",
            "xinserve.client.clients.by-token.address=dns:///127.0.0.1:" + servers.server.port,
            "xinserve.client.clients.by-token.plaintext=true",
            "xinserve.client.clients.by-token.ssl.bundle=",
            "xinserve.client.clients.by-token.token=" + LiveServers.TOKEN)
        .run(ctx -> {
          assertThat(ctx).hasNotFailed();
          XinserveClient c = ctx.getBean(XinserveClient.class);
          assertThat(c.listModels()).extracting(Model::getName).contains(TINY);
          assertThat(ctx.getBean(XinserveClients.class).get("by-token").listModels()).isNotEmpty();
          HealthContributor h = ctx.getBean("xinserveHealthContributor", HealthContributor.class);
          assertThat(h).isInstanceOf(org.springframework.boot.actuate.health.CompositeHealthContributor.class);
          var composite = (org.springframework.boot.actuate.health.CompositeHealthContributor) h;
          assertThat(((HealthIndicator) composite.getContributor("default")).health().getStatus())
              .isEqualTo(Status.UP);
          assertThat(((HealthIndicator) composite.getContributor("by-token")).health().getStatus())
              .isEqualTo(Status.UP);
        });
  }
}
