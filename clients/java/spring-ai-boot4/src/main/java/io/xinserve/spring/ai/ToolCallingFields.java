package io.xinserve.spring.ai;

import java.util.Set;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.model.tool.ToolCallingChatOptions;

/**
 * Spring AI 2.0's {@link ToolCallingChatOptions} have no {@code toolNames} and no {@code
 * internalToolExecutionEnabled} (Spring AI 1.1's module reads them from its options); the tools
 * are run by {@code ChatClient}'s {@code ToolCallingAdvisor} (auto-registered), as with Spring AI
 * 2.0's own models, so the chat model returns the tool calls and never runs them.
 */
final class ToolCallingFields {
  private ToolCallingFields() {}

  /**
   * @param options the request's options
   * @param response the model's reply
   * @return {@code false}: on Spring AI 2.0 the caller ({@code ChatClient}'s {@code
   *     ToolCallingAdvisor}, or an application with its own {@code ToolCallingManager}) runs the
   *     tool calls of the reply
   */
  static boolean modelRunsTools(ChatOptions options, ChatResponse response) {
    return false;
  }

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
