package io.xinserve.spring.boot;

import java.io.IOException;
import java.io.InputStream;
import java.util.Properties;
import org.springframework.boot.SpringBootVersion;

/**
 * Refuses to run the starter on a Spring Boot generation it was not built for. Boot 4 moved
 * packages the starter uses (the Actuator health API among them), so on the wrong generation it
 * would lose features silently; failing at start-up names the module to use instead.
 */
final class BootGeneration {
  private BootGeneration() {}

  /**
   * @param bootVersion the running Spring Boot version ({@link SpringBootVersion#getVersion()}),
   *     or {@code null} if unknown (then nothing is checked)
   * @param expectedMajor the Boot major version this module was built for
   * @param module this module's artifact id
   * @param alternative the artifact id to use on the other generation
   * @throws XinserveBootGenerationException on another major version, naming both modules
   */
  static void require(String bootVersion, int expectedMajor, String module, String alternative) {
    if (bootVersion == null || bootVersion.isBlank()) {
      return;
    }
    String major = bootVersion.split("\\.", 2)[0];
    if (!major.equals(Integer.toString(expectedMajor))) {
      throw new XinserveBootGenerationException(
          module
              + " is built for Spring Boot "
              + expectedMajor
              + ".x but the application runs Spring Boot "
              + bootVersion
              + "; use io.xinserve:"
              + alternative
              + " instead (see docs/java.md, Spring Boot 3 and 4)",
          alternative);
    }
  }

  /**
   * The artifact id and Spring Boot version this jar was built with ({@code build.properties},
   * filled in by the module's build).
   *
   * @return the properties {@code artifact} and {@code spring-boot.version}
   * @throws IllegalStateException if the jar holds no readable {@code build.properties}
   */
  static Properties builtFor() {
    Properties p = new Properties();
    try (InputStream in = BootGeneration.class.getResourceAsStream("build.properties")) {
      if (in == null) {
        throw new IllegalStateException("the xinserve starter jar holds no build.properties");
      }
      p.load(in);
    } catch (IOException e) {
      throw new IllegalStateException("cannot read the xinserve starter's build.properties", e);
    }
    return p;
  }

  /**
   * Checks the running Spring Boot against the generation this jar was built for.
   *
   * @throws IllegalStateException on another major version, naming the starter to use
   */
  static void requireBuiltGeneration() {
    Properties built = builtFor();
    int major = Integer.parseInt(built.getProperty("spring-boot.version").split("\\.", 2)[0]);
    require(
        SpringBootVersion.getVersion(),
        major,
        built.getProperty("artifact"),
        major == 3 ? "xinserve-spring-boot4-starter" : "xinserve-spring-boot-starter");
  }
}
