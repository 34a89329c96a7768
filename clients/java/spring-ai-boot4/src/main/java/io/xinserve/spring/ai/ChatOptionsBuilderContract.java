package io.xinserve.spring.ai;

import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.model.tool.StructuredOutputChatOptions;
import org.springframework.ai.model.tool.ToolCallingChatOptions;

/**
 * What Spring AI 2.0 asks of {@link XinserveChatOptions.Builder}: its {@code
 * StructuredOutputChatOptions.Builder} and {@code ToolCallingChatOptions.Builder} interfaces (the
 * setters and {@code clone()} are in the shared builder), and {@code combineWith}, whose parameter
 * type ({@code ChatOptions.Builder<?>}) exists in Spring AI 2.0 only. Spring AI 1.1's module
 * defines this type as an empty interface.
 *
 * <p>{@code ChatClient} builds every request's options as {@code
 * chatModel.getOptions().mutate().combineWith(userBuilder)} and hands tools to the result when it
 * is a {@code ToolCallingChatOptions.Builder}: so the per-call xinserve fields survive, and tools
 * reach {@link XinserveChatModel} (which offers them to the model) instead of being dropped.
 */
interface ChatOptionsBuilderContract
    extends StructuredOutputChatOptions.Builder<XinserveChatOptions.Builder>,
        ToolCallingChatOptions.Builder<XinserveChatOptions.Builder> {

  /**
   * @param other a builder whose set fields win over this one's, may be {@code null}
   * @return this builder
   */
  @Override
  default XinserveChatOptions.Builder combineWith(ChatOptions.Builder<?> other) {
    XinserveChatOptions.Builder self = (XinserveChatOptions.Builder) this;
    return other == null ? self : self.mergeFrom(other.build());
  }

  @Override
  XinserveChatOptions build();
}
