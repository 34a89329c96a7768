package io.xinserve.spring.boot;

import org.springframework.boot.diagnostics.AbstractFailureAnalyzer;
import org.springframework.boot.diagnostics.FailureAnalysis;

/**
 * Turns a {@link XinserveConfigurationException} at start-up into Spring Boot's "APPLICATION
 * FAILED TO START" report: the client, what is wrong and the property to fix.
 */
public class XinserveFailureAnalyzer extends AbstractFailureAnalyzer<XinserveConfigurationException> {
  @Override
  protected FailureAnalysis analyze(Throwable rootFailure, XinserveConfigurationException cause) {
    return new FailureAnalysis(cause.getMessage(), cause.action(), cause);
  }
}
