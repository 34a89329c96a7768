package io.xinserve.spring.ai;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.xinserve.v1.ChatRequest;
import io.xinserve.v1.ChatMessage;
import io.xinserve.v1.Tool;
import io.xinserve.v1.ToolCall;
import io.xinserve.v1.ToolChoiceMode;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.springframework.ai.chat.client.AdvisorParams;
import org.springframework.ai.chat.client.ChatClient;
import org.springframework.ai.chat.messages.AssistantMessage;
import org.springframework.ai.chat.model.ChatResponse;
import org.springframework.ai.chat.prompt.Prompt;
import org.springframework.ai.retry.NonTransientAiException;
import org.springframework.ai.support.ToolCallbacks;

/**
 * Through {@code ChatClient}, on whichever Spring AI line this module builds (the source is shared
 * by xinserve-spring-ai and xinserve-spring-ai-boot4): tools reach the server as {@code tools}
 * with a {@code tool_choice}, their calls are run (by the model on Spring AI 1.1, by {@code
 * ChatClient}'s ToolCallingAdvisor on 2.0) and their results sent back; native structured output
 * reaches the server as {@code json_schema}.
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
    final List<String> accounts = new CopyOnWriteArrayList<>();

    @org.springframework.ai.tool.annotation.Tool(description = "The balance of an account, in yuan")
    String accountBalance(String account) {
      accounts.add(account);
      return "1000";
    }
  }

  record Balance(String account, int balance) {}

  private static final ToolCall BALANCE_OF_42 =
      ToolCall.newBuilder().setId("call_1").setName("accountBalance").setArguments("{\"account\": \"42\"}").build();

  @Test
  void toolsGivenToChatClientAreOfferedRunAndAnsweredWithTheirResults() {
    server.toolCall = BALANCE_OF_42;
    server.reply = "The balance is 1000 yuan.";
    BankTools tools = new BankTools();
    ChatClient chat =
        ChatClient.create(
            new XinserveChatModel(
                server.client, XinserveChatOptions.builder().temperature(0.0).toolChoice("required").build()));

    String answer = chat.prompt().user("What is the balance of account 42?").tools(tools).call().content();

    assertThat(answer).isEqualTo("The balance is 1000 yuan.");
    assertThat(tools.accounts).containsExactly("42");
    assertThat(server.requests).hasSize(2);
    ChatRequest first = server.requests.get(0);
    assertThat(first.getToolsList()).extracting(Tool::getName).containsExactly("accountBalance");
    assertThat(first.getTools(0).getDescription()).isEqualTo("The balance of an account, in yuan");
    assertThat(first.getTools(0).getParametersJson()).contains("\"account\"");
    assertThat(first.getToolChoice().getMode()).isEqualTo(ToolChoiceMode.TOOL_CHOICE_MODE_REQUIRED);
    ChatRequest second = server.requests.get(1);
    assertThat(second.getToolChoice().getMode())
        .as("after tool results the model answers in text")
        .isEqualTo(ToolChoiceMode.TOOL_CHOICE_MODE_NONE);
    ChatMessage call = second.getMessages(second.getMessagesCount() - 2);
    assertThat(call.getRole()).isEqualTo("assistant");
    assertThat(call.getContent()).as("the forced JSON is not the assistant's text").isEmpty();
    assertThat(call.getToolCallsList()).containsExactly(BALANCE_OF_42);
    ChatMessage result = second.getMessages(second.getMessagesCount() - 1);
    assertThat(result.getRole()).isEqualTo("tool");
    assertThat(result.getToolCallId()).isEqualTo("call_1");
    assertThat(result.getContent()).isEqualTo("1000");
  }

  @Test
  void toolsRunWhileStreamingAndOnlyTheAnswerIsStreamed() {
    server.toolCall = BALANCE_OF_42;
    server.reply = "1000 yuan";
    BankTools tools = new BankTools();
    ChatClient chat =
        ChatClient.builder(new XinserveChatModel(server.client, XinserveChatOptions.builder().toolChoice("accountBalance").build()))
            .defaultTools(tools)
            .build();

    List<String> parts = chat.prompt().user("balance of 42?").stream().content().collectList().block(Duration.ofSeconds(30));

    assertThat(String.join("", parts)).isEqualTo("1000 yuan");
    assertThat(tools.accounts).containsExactly("42");
    assertThat(server.requests).hasSize(2);
    assertThat(server.requests.get(0).getToolChoice().getFunctionName()).isEqualTo("accountBalance");
  }

  @Test
  void aChatModelCallWithoutTheLoopReturnsTheToolCalls() {
    server.toolCall = BALANCE_OF_42;
    BankTools tools = new BankTools();
    XinserveChatModel model = new XinserveChatModel(server.client, null);
    XinserveChatOptions options =
        XinserveChatOptions.builder()
            .toolCallbacks(ToolCallbacks.from(tools))
            .toolChoice("required")
            .internalToolExecutionEnabled(false)
            .build();

    ChatResponse r = model.call(new Prompt("balance of 42?", options));

    assertThat(r.hasToolCalls()).isTrue();
    AssistantMessage out = r.getResult().getOutput();
    assertThat(out.getText()).isEmpty();
    assertThat(out.getToolCalls())
        .containsExactly(new AssistantMessage.ToolCall("call_1", "function", "accountBalance", "{\"account\": \"42\"}"));
    assertThat(tools.accounts).as("the caller runs the tools").isEmpty();
    assertThat(server.requests).hasSize(1);
  }

  @Test
  void aForcedRoundWhoseReplyHoldsNoToolCallFailsInsteadOfAnsweringWithTheCutJson() {
    server.reply = "[{\"name\": \"accountBal";
    BankTools tools = new BankTools();
    ChatClient chat =
        ChatClient.create(new XinserveChatModel(server.client, XinserveChatOptions.builder().toolChoice("required").build()));

    assertThatThrownBy(() -> chat.prompt().user("balance of 42?").tools(tools).call().content())
        .isInstanceOf(NonTransientAiException.class)
        .hasMessageContaining("forced a tool call, but the reply holds none")
        .hasMessageContaining("raise maxTokens");
    assertThatThrownBy(
            () -> chat.prompt().user("balance of 42?").tools(tools).stream().content().collectList().block(Duration.ofSeconds(30)))
        .isInstanceOf(NonTransientAiException.class)
        .hasMessageContaining("forced a tool call");
    assertThat(tools.accounts).isEmpty();
  }

  @Test
  void withoutAToolChoiceTheModelChoosesAndWithoutToolsNoChoiceIsSent() {
    ChatClient chat = ChatClient.create(new XinserveChatModel(server.client, null));
    assertThat(chat.prompt().user("hello").tools(new BankTools()).call().content()).isEqualTo("ok");
    assertThat(server.only().getToolChoice().getMode()).isEqualTo(ToolChoiceMode.TOOL_CHOICE_MODE_AUTO);

    ChatClient forcing =
        ChatClient.create(new XinserveChatModel(server.client, XinserveChatOptions.builder().toolChoice("required").build()));
    assertThat(forcing.prompt().user("hello").call().content())
        .as("a default forced choice leaves prompts without tools alone")
        .isEqualTo("ok");
    assertThat(server.requests).hasSize(2);
    assertThat(server.requests.get(1).hasToolChoice()).isFalse();
    assertThat(server.requests.get(1).getToolsCount()).isZero();
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
