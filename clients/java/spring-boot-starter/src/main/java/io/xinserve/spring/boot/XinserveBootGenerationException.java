package io.xinserve.spring.boot;

/**
 * The starter runs on a Spring Boot generation it was not built for. Reported at start-up by
 * {@link XinserveFailureAnalyzer.WrongBootGeneration} with the module to use instead.
 */
public class XinserveBootGenerationException extends IllegalStateException {
  private static final long serialVersionUID = 1L;

  private final String alternative;

  /**
   * @param message what runs and what the module was built for
   * @param alternative the artifact id of the module for the running generation
   */
  public XinserveBootGenerationException(String message, String alternative) {
    super(message);
    this.alternative = alternative;
  }

  /** @return the artifact id of the module for the running generation */
  public String alternative() {
    return alternative;
  }
}
