package io.xinserve.spring.ai;

import org.springframework.ai.chat.observation.ChatModelObservationContext;
import org.springframework.ai.chat.prompt.Prompt;

/**
 * Builds Spring AI 1.1's {@link ChatModelObservationContext} (prompt and provider; Spring AI 2.0's
 * module sets its {@code streaming} flag as well).
 */
final class ChatObservations {
  private ChatObservations() {}

  /**
   * @param prompt the prompt sent, its options the request's (model resolved)
   * @param provider the {@code gen_ai.provider.name} / {@code gen_ai.system} value
   * @param streaming whether the call streams (not recorded by Spring AI 1.1)
   * @return the observation context of one chat-model call
   */
  static ChatModelObservationContext context(Prompt prompt, String provider, boolean streaming) {
    return ChatModelObservationContext.builder().prompt(prompt).provider(provider).build();
  }
}
