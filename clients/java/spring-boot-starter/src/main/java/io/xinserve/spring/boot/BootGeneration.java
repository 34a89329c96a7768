package io.xinserve.spring.boot;

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
   * @throws IllegalStateException on another major version, naming both modules
   */
  static void require(String bootVersion, int expectedMajor, String module, String alternative) {
    if (bootVersion == null || bootVersion.isBlank()) {
      return;
    }
    String major = bootVersion.split("\\.", 2)[0];
    if (!major.equals(Integer.toString(expectedMajor))) {
      throw new IllegalStateException(
          module
              + " is built for Spring Boot "
              + expectedMajor
              + ".x but the application runs Spring Boot "
              + bootVersion
              + "; use io.xinserve:"
              + alternative
              + " instead (see docs/java.md, Spring Boot 3 and 4)");
    }
  }

  /** Checks the running Boot version for this (the Boot 3) starter. */
  static void requireBoot3() {
    require(
        SpringBootVersion.getVersion(),
        3,
        "xinserve-spring-boot-starter",
        "xinserve-spring-boot4-starter");
  }
}
