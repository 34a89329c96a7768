package io.xinserve.spring.ai;

/**
 * What Spring AI 1.1 asks of {@link XinserveChatOptions.Builder}: nothing (Spring AI 1.1 options
 * are derived with {@code ChatOptions.copy()}, not through a builder interface). Spring AI 2.0's
 * module defines this type as its {@code StructuredOutputChatOptions.Builder}.
 */
interface ChatOptionsBuilderContract {}
