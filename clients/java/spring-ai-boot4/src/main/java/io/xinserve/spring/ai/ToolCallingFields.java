package io.xinserve.spring.ai;

import java.util.Set;
import org.springframework.ai.model.tool.ToolCallingChatOptions;

/**
 * Spring AI 2.0's {@link ToolCallingChatOptions} have no {@code toolNames} and no {@code
 * internalToolExecutionEnabled} (Spring AI 1.1's module reads them from its options).
 */
final class ToolCallingFields {
  private ToolCallingFields() {}

  /**
   * @param options tool-calling options
   * @return no names: Spring AI 2.0 passes tools as callbacks only
   */
  static Set<String> toolNames(ToolCallingChatOptions options) {
    return Set.of();
  }

  /**
   * @param options tool-calling options
   * @return {@code null}: Spring AI 2.0 has no such option on the chat options
   */
  static Boolean internalToolExecutionEnabled(ToolCallingChatOptions options) {
    return null;
  }
}
