package io.xinserve.spring.ai;

import java.util.Set;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.model.tool.DefaultToolExecutionEligibilityPredicate;
import org.springframework.ai.model.tool.ToolCallingChatOptions;
import org.springframework.ai.model.tool.ToolExecutionEligibilityPredicate;

/**
 * The fields of Spring AI 1.1's {@link ToolCallingChatOptions} that Spring AI 2.0 removed ({@code
 * toolNames}, {@code internalToolExecutionEnabled}), and who runs the tools: on Spring AI 1.1 the
 * chat model runs the {@code ToolCallingManager} loop itself (as Spring AI 1.1's {@code
 * OpenAiChatModel} does). Spring AI 2.0's module defines this type returning none, and leaves the
 * loop to {@code ChatClient}'s {@code ToolCallingAdvisor}.
 */
final class ToolCallingFields {
  private static final ToolExecutionEligibilityPredicate ELIGIBLE =
      new DefaultToolExecutionEligibilityPredicate();

  private ToolCallingFields() {}

  /**
   * @param options the request's options
   * @param response the model's reply
   * @return whether the chat model runs the reply's tool calls and sends the results back: the
   *     reply has tool calls and {@code internalToolExecutionEnabled} is not {@code false}
   */
  static boolean modelRunsTools(ChatOptions options, ChatResponse response) {
    return ELIGIBLE.test(options, response);
  }

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
