package io.xinserve.spring.ai;

import java.util.Properties;
import java.util.function.Supplier;
import org.springframework.boot.SpringBootVersion;
import org.springframework.context.ApplicationContextInitializer;
import org.springframework.context.ConfigurableApplicationContext;

/**
 * Checks, before any bean definition or auto-configuration is read, that the application runs
 * the Spring Boot generation this jar was built for ({@code xinserve-spring-ai}: Boot 3.5 /
 * Spring AI 1.1; {@code xinserve-spring-ai-boot4}: Boot 4.0 / Spring AI 2.0). On the other
 * generation the Spring AI classes this jar was compiled against are missing or changed, so the
 * check runs as an {@link ApplicationContextInitializer} (registered in {@code
 * META-INF/spring.factories}, applied by {@link org.springframework.boot.SpringApplication})
 * and throws {@link io.xinserve.spring.boot.XinserveBootGenerationException}, which the
 * starter's {@code XinserveFailureAnalyzer.WrongBootGeneration} turns into Spring Boot's
 * "APPLICATION FAILED TO START" report naming the artifact to use.
 */
public final class SpringBootGenerationCheck
    implements ApplicationContextInitializer<ConfigurableApplicationContext> {
  private final Supplier<String> runningBootVersion;

  /** Checks against {@link SpringBootVersion#getVersion()}. */
  public SpringBootGenerationCheck() {
    this(SpringBootVersion::getVersion);
  }

  SpringBootGenerationCheck(Supplier<String> runningBootVersion) {
    this.runningBootVersion = runningBootVersion;
  }

  /**
   * @param context the context being prepared (not used)
   * @throws io.xinserve.spring.boot.XinserveBootGenerationException if the running Spring Boot
   *     major version differs from the one this jar was built for
   */
  @Override
  public void initialize(ConfigurableApplicationContext context) {
    Properties built = BuiltFor.properties();
    BuiltFor.require(
        runningBootVersion.get(),
        built.getProperty("spring-boot.version"),
        built.getProperty("artifact"));
  }
}
