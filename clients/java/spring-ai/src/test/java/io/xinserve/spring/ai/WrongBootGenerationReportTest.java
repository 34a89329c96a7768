package io.xinserve.spring.ai;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.xinserve.spring.boot.XinserveBootGenerationException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.SpringBootVersion;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.ApplicationContextInitializer;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.io.support.SpringFactoriesLoader;

/**
 * The Spring AI module on the other Spring Boot generation ({@code xinserve-spring-ai} on Boot 4,
 * {@code xinserve-spring-ai-boot4} on Boot 3) ends a real {@link SpringApplication} start in
 * Spring Boot's "APPLICATION FAILED TO START" report naming the artifact to use, before any
 * auto-configuration compiled against the other Spring AI is read. The same test runs in both
 * modules; the running generation is the module's own, so the check is given the other one.
 */
@ExtendWith(OutputCaptureExtension.class)
class WrongBootGenerationReportTest {
  @Configuration(proxyBeanMethods = false)
  static class EmptyApp {}

  private static boolean builtForBoot3() {
    return SpringBootVersion.getVersion().startsWith("3.");
  }

  @Test
  void theOtherBootGenerationEndsInBootsFailureReportNamingTheRightArtifact(CapturedOutput output) {
    String otherBoot = builtForBoot3() ? "4.0.7" : "3.5.7";
    String self = builtForBoot3() ? "xinserve-spring-ai" : "xinserve-spring-ai-boot4";
    String right = builtForBoot3() ? "xinserve-spring-ai-boot4" : "xinserve-spring-ai";
    SpringApplication app = new SpringApplication(EmptyApp.class);
    app.setWebApplicationType(WebApplicationType.NONE);
    app.addInitializers(new SpringBootGenerationCheck(() -> otherBoot));

    assertThatThrownBy(app::run).isInstanceOf(XinserveBootGenerationException.class);
    assertThat(output)
        .contains("APPLICATION FAILED TO START")
        .contains(
            self
                + " is built for Spring Boot "
                + (builtForBoot3() ? "3" : "4")
                + ".x but the application runs Spring Boot "
                + otherBoot)
        .contains("Replace the dependency with io.xinserve:" + right)
        .doesNotContain("\tat io.xinserve.spring.ai.");
  }

  @Test
  void theCheckIsRegisteredForEverySpringApplicationAndPassesOnItsOwnGeneration() {
    assertThat(
            SpringFactoriesLoader.forDefaultResourceLocation()
                .load(ApplicationContextInitializer.class))
        .hasAtLeastOneElementOfType(SpringBootGenerationCheck.class);
    SpringApplication app = new SpringApplication(EmptyApp.class);
    app.setWebApplicationType(WebApplicationType.NONE);
    app.run().close();
  }
}
