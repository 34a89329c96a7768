package io.xinserve.spring.boot;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.ImportAutoConfiguration;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;

/**
 * A real {@link SpringApplication} start that selects an unconfigured client name ends in Spring
 * Boot's failure report (the analyzers registered in {@code META-INF/spring.factories}), not in a
 * bare stack trace; the wrong Boot generation has its own report.
 */
@ExtendWith(OutputCaptureExtension.class)
class FailureReportBoot4Test {
  @Configuration(proxyBeanMethods = false)
  @ImportAutoConfiguration(XinserveClientAutoConfiguration.class)
  static class SelectsClientNope {
    @Bean
    String usesNope(XinserveClients clients) {
      return clients.get("nope").target();
    }
  }

  @Test
  void anUnknownClientNameEndsInBootsFailureReport(CapturedOutput output) {
    SpringApplication app = new SpringApplication(SelectsClientNope.class);
    app.setWebApplicationType(WebApplicationType.NONE);
    assertThatThrownBy(() -> app.run("--xinserve.client.address=127.0.0.1:1", "--xinserve.client.plaintext=true"))
        .hasRootCauseInstanceOf(UnknownXinserveClientException.class);
    assertThat(output)
        .contains("APPLICATION FAILED TO START")
        .contains("no xinserve client named 'nope'; configured: [default]")
        .contains("Set the property that selects the client (e.g. xinserve.ai.client) to one of [default]")
        .contains("xinserve.client.clients.nope.address");
  }

  @Test
  void theWrongBootGenerationIsReportedWithTheModuleToUse() {
    XinserveBootGenerationException e =
        org.assertj.core.api.Assertions.catchThrowableOfType(
            XinserveBootGenerationException.class,
            () ->
                BootGeneration.require(
                    "3.5.7", 4, "xinserve-spring-boot4-starter", "xinserve-spring-boot-starter"));
    var analysis =
        new XinserveFailureAnalyzer.WrongBootGeneration()
            .analyze(new IllegalStateException("wrapped", e));
    assertThat(analysis.getDescription())
        .contains("built for Spring Boot 4.x but the application runs Spring Boot 3.5.7");
    assertThat(analysis.getAction()).contains("io.xinserve:xinserve-spring-boot-starter");
  }
}
