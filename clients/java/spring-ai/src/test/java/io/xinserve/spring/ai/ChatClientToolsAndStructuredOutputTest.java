package io.xinserve.spring.ai;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.xinserve.v1.ChatRequest;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.ai.chat.client.AdvisorParams;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.tool.annotation.Tool;

/**
 * Through {@code ChatClient}, on whichever Spring AI line this module builds (the source is shared
 * by xinserve-spring-ai and xinserve-spring-ai-boot4): tools are refused, never dropped; native
 * structured output reaches the server as {@code json_schema}.
 */
@Timeout(60)
class ChatClientToolsAndStructuredOutputTest {
  private RecordingChatServer server;

  @BeforeEach
  void start() throws Exception {
    server = new RecordingChatServer();
  }

  @AfterEach
  void stop() throws Exception {
    server.close();
  }

  static final class BankTools {
    final AtomicInteger calls = new AtomicInteger();

    @Tool(description = "The balance of an account, in yuan")
    String accountBalance(String account) {
      calls.incrementAndGet();
      return "1000";
    }
  }

  record Balance(String account, int balance) {}

  @Test
  void toolsGivenToChatClientAreRefusedBeforeAnyCallInsteadOfDropped() {
    ChatClient chat =
        ChatClient.create(
            new XinserveChatModel(server.client, XinserveChatOptions.builder().temperature(0.0).build()));
    BankTools tools = new BankTools();

    assertThatThrownBy(() -> chat.prompt().user("What is the balance of account 42?").tools(tools).call().content())
        .isInstanceOf(UnsupportedOperationException.class)
        .hasMessageContaining("[accountBalance]")
        .hasMessageContaining("cannot call tools");
    assertThatThrownBy(
            () ->
                chat.prompt()
                    .user("What is the balance of account 42?")
                    .tools(tools)
                    .stream()
                    .content()
                    .collectList()
                    .block(Duration.ofSeconds(30)))
        .isInstanceOf(UnsupportedOperationException.class)
        .hasMessageContaining("[accountBalance]");
    assertThat(server.requests).as("nothing sent to the server").isEmpty();
    assertThat(tools.calls).hasValue(0);

    ChatClient withDefaultTools = ChatClient.builder(new XinserveChatModel(server.client, null)).defaultTools(tools).build();
    assertThatThrownBy(() -> withDefaultTools.prompt().user("balance?").call().content())
        .isInstanceOf(UnsupportedOperationException.class)
        .hasMessageContaining("[accountBalance]");
    assertThat(server.requests).isEmpty();

    assertThat(chat.prompt().user("hello").call().content()).as("a prompt without tools still works").isEqualTo("ok");
  }

  @Test
  void nativeStructuredOutputSendsTheSchemaAndNoFormatInstructions() {
    server.reply = "{\"account\":\"42\",\"balance\":1000}";
    ChatClient chat = ChatClient.create(new XinserveChatModel(server.client, null));
    Balance b =
        chat.prompt()
            .user("balance of 42")
            .advisors(AdvisorParams.ENABLE_NATIVE_STRUCTURED_OUTPUT)
            .call()
            .entity(Balance.class);
    assertThat(b).isEqualTo(new Balance("42", 1000));
    ChatRequest sent = server.only();
    assertThat(sent.getSamplingParams().getJsonSchema()).contains("\"balance\"").contains("\"account\"");
    assertThat(sent.getMessages(sent.getMessagesCount() - 1).getContent())
        .as("native: the schema is not pasted into the prompt")
        .isEqualTo("balance of 42");
  }
}
