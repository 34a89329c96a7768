package io.xinserve.demo;

import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;

/** The demo web app: {@code GET /api/generate/stream?prompt=...} streams tokens as SSE. */
@SpringBootApplication
public class DemoApplication {
  /**
   * @param args command-line arguments
   */
  public static void main(String[] args) {
    SpringApplication.run(DemoApplication.class, args);
  }
}
