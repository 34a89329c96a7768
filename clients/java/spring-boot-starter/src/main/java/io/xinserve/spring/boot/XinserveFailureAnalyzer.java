package io.xinserve.spring.boot;

import org.springframework.boot.diagnostics.AbstractFailureAnalyzer;
import org.springframework.boot.diagnostics.FailureAnalysis;

/**
 * Turns a {@link XinserveConfigurationException} at start-up into Spring Boot's "APPLICATION
 * FAILED TO START" report: the client, what is wrong and the property to fix. The nested
 * analyzers do the same for an unknown client name and for the wrong Spring Boot generation (all
 * three are registered in {@code META-INF/spring.factories}).
 */
public class XinserveFailureAnalyzer extends AbstractFailureAnalyzer<XinserveConfigurationException> {
  @Override
  protected FailureAnalysis analyze(Throwable rootFailure, XinserveConfigurationException cause) {
    return new FailureAnalysis(cause.getMessage(), cause.action(), cause);
  }

  /** Reports an {@link UnknownXinserveClientException}: the name and the configured ones. */
  public static class UnknownClient extends AbstractFailureAnalyzer<UnknownXinserveClientException> {
    @Override
    protected FailureAnalysis analyze(Throwable rootFailure, UnknownXinserveClientException cause) {
      return new FailureAnalysis(
          cause.getMessage(),
          "Set the property that selects the client (e.g. xinserve.ai.client) to one of "
              + cause.configured()
              + ", or configure xinserve.client.clients."
              + cause.name()
              + ".address.",
          cause);
    }
  }

  /** Reports a {@link XinserveBootGenerationException}: the module to use instead. */
  public static class WrongBootGeneration
      extends AbstractFailureAnalyzer<XinserveBootGenerationException> {
    @Override
    protected FailureAnalysis analyze(Throwable rootFailure, XinserveBootGenerationException cause) {
      return new FailureAnalysis(
          cause.getMessage(),
          "Replace the dependency with io.xinserve:"
              + cause.alternative()
              + " (see docs/java.md, Spring Boot 3 and 4).",
          cause);
    }
  }
}
