package io.xinserve.spring.ai;

import org.springframework.ai.chat.observation.ChatModelObservationContext;
import org.springframework.ai.chat.prompt.Prompt;

/**
 * Builds Spring AI 2.0's {@link ChatModelObservationContext}: prompt, provider and the {@code
 * streaming} flag ({@code gen_ai.request.stream}).
 */
final class ChatObservations {
  private ChatObservations() {}

  /**
   * @param prompt the prompt sent, its options the request's (model resolved)
   * @param provider the {@code gen_ai.provider.name} value
   * @param streaming whether the call streams
   * @return the observation context of one chat-model call
   */
  static ChatModelObservationContext context(Prompt prompt, String provider, boolean streaming) {
    return ChatModelObservationContext.builder()
        .prompt(prompt)
        .provider(provider)
        .streaming(streaming)
        .build();
  }
}
