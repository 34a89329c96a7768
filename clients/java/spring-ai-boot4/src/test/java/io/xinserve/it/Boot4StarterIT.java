package io.xinserve.it;

import static io.xinserve.it.LiveServers.TINY;
import static org.assertj.core.api.Assertions.assertThat;

import io.xinserve.client.XinserveClient;
import io.xinserve.spring.boot.XinserveClientAutoConfiguration;
import io.xinserve.spring.boot.XinserveHealthAutoConfiguration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.SpringBootVersion;
import org.springframework.boot.autoconfigure.AutoConfigurations;
import org.springframework.boot.health.contributor.Health;
import org.springframework.boot.health.contributor.HealthIndicator;
import org.springframework.boot.health.contributor.Status;
import org.springframework.boot.test.context.runner.ApplicationContextRunner;

/**
 * The Spring Boot 4 starter ({@code xinserve-spring-boot4-starter}) against the live server,
 * configured only through properties: the auto-configured {@link XinserveClient} answers a
 * {@code generateText()} call with the default model, and Boot 4's health contributor is UP.
 */
@ExtendWith(XinserveServerExtension.class)
@Timeout(value = 300, unit = TimeUnit.SECONDS)
class Boot4StarterIT {
  @Test
  void aClientFromPropertiesGeneratesTextAndHealthIsUp() {
    assertThat(SpringBootVersion.getVersion()).startsWith("4.");
    new ApplicationContextRunner()
        .withConfiguration(
            AutoConfigurations.of(
                XinserveClientAutoConfiguration.class, XinserveHealthAutoConfiguration.class))
        .withPropertyValues(
            "xinserve.client.address=dns:///127.0.0.1:" + LiveServers.get().server.port,
            "xinserve.client.plaintext=true",
            "xinserve.client.token=" + LiveServers.TOKEN,
            "xinserve.client.deadline.unary=120s",
            "xinserve.client.model=" + TINY)
        .run(
            ctx -> {
              assertThat(ctx).hasNotFailed();
              String text = ctx.getBean(XinserveClient.class).generateText("The capital of France is");
              assertThat(text).isNotBlank();

              Health h = ctx.getBean("xinserveHealthContributor", HealthIndicator.class).health();
              assertThat(h.getStatus()).isEqualTo(Status.UP);
              assertThat(String.valueOf(h.getDetails().get("target")))
                  .endsWith(":" + LiveServers.get().server.port);
            });
  }
}
