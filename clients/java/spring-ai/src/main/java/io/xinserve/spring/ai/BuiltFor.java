package io.xinserve.spring.ai;

import io.xinserve.spring.boot.XinserveBootGenerationException;
import java.io.IOException;
import java.io.InputStream;
import java.util.Properties;

/**
 * The Spring Boot and Spring AI generation this jar was built for (the same sources are built for
 * Boot 3.5 / Spring AI 1.1 as {@code xinserve-spring-ai} and for Boot 4.0 / Spring AI 2.0 as
 * {@code xinserve-spring-ai-boot4}), and the check that the application runs that generation.
 */
final class BuiltFor {
  private BuiltFor() {}

  static Properties properties() {
    Properties p = new Properties();
    try (InputStream in = BuiltFor.class.getResourceAsStream("build.properties")) {
      if (in != null) {
        p.load(in);
      }
    } catch (IOException e) {
      throw new IllegalStateException("cannot read xinserve-spring-ai's build.properties", e);
    }
    return p;
  }

  /**
   * @param runningBoot the running Spring Boot version, or {@code null} if unknown (no check)
   * @param builtBoot the Spring Boot version this jar was built for
   * @param artifact this jar's artifact id
   * @throws XinserveBootGenerationException if the major versions differ, naming the artifact
   *     to use ({@link XinserveBootGenerationException#alternative()})
   */
  static void require(String runningBoot, String builtBoot, String artifact) {
    if (runningBoot == null || builtBoot == null) {
      return;
    }
    String running = runningBoot.split("\\.", 2)[0];
    String built = builtBoot.split("\\.", 2)[0];
    if (!running.equals(built)) {
      String other = built.equals("3") ? "xinserve-spring-ai-boot4" : "xinserve-spring-ai";
      throw new XinserveBootGenerationException(
          artifact
              + " is built for Spring Boot "
              + built
              + ".x but the application runs Spring Boot "
              + runningBoot
              + "; use io.xinserve:"
              + other
              + " instead (see docs/java.md, Spring Boot 3 and 4)",
          other);
    }
  }
}
