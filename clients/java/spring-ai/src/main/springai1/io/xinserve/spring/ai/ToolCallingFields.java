package io.xinserve.spring.ai;

import java.util.Set;
import org.springframework.ai.model.tool.ToolCallingChatOptions;

/**
 * The fields of Spring AI 1.1's {@link ToolCallingChatOptions} that Spring AI 2.0 removed ({@code
 * toolNames}, {@code internalToolExecutionEnabled}); Spring AI 2.0's module defines this type
 * returning none.
 */
final class ToolCallingFields {
  private ToolCallingFields() {}

  /**
   * @param options tool-calling options
   * @return their tool names, empty if none
   */
  static Set<String> toolNames(ToolCallingChatOptions options) {
    Set<String> names = options.getToolNames();
    return names == null ? Set.of() : Set.copyOf(names);
  }

  /**
   * @param options tool-calling options
   * @return whether Spring AI runs the tools itself, {@code null} for its default
   */
  static Boolean internalToolExecutionEnabled(ToolCallingChatOptions options) {
    return options.getInternalToolExecutionEnabled();
  }
}
