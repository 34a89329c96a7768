package io.xinserve.spring.ai;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.List;
import org.junit.jupiter.api.Test;
import org.springframework.ai.chat.prompt.ChatOptions;
import org.springframework.ai.model.tool.StructuredOutputChatOptions;

/** The shared XinserveChatOptions through Spring AI 2.0's builder API (mutate, combineWith). */
class XinserveChatOptionsSpringAi2Test {

  @Test
  void mutateStartsFromTheOptionsAndCombineWithTakesOnlyTheOtherBuildersSetFields() {
    XinserveChatOptions base =
        XinserveChatOptions.builder()
            .model("tiny")
            .temperature(0.0)
            .maxTokens(8)
            .seed(7L)
            .outputSchema("{\"type\":\"object\"}")
            .build();

    ChatOptions.Builder<?> portable = ChatOptions.builder().maxTokens(3).stopSequences(List.of("."));
    ChatOptions combined = base.mutate().combineWith(portable).build();

    assertThat(combined).isInstanceOf(XinserveChatOptions.class);
    XinserveChatOptions x = (XinserveChatOptions) combined;
    assertThat(x.getModel()).isEqualTo("tiny");
    assertThat(x.getTemperature()).isEqualTo(0.0);
    assertThat(x.getMaxTokens()).isEqualTo(3);
    assertThat(x.getStopSequences()).containsExactly(".");
    assertThat(x.getSeed()).isEqualTo(7L);
    assertThat(x.getOutputSchema()).isEqualTo("{\"type\":\"object\"}");
    // mutate() copies: the original is unchanged
    assertThat(base.getMaxTokens()).isEqualTo(8);
    assertThat(base.getStopSequences()).isNull();
  }

  @Test
  void theBuilderIsSpringAisStructuredOutputBuilderAndClonesIndependently() {
    XinserveChatOptions.Builder b = XinserveChatOptions.builder().temperature(0.5);
    assertThat(b).isInstanceOf(StructuredOutputChatOptions.Builder.class);
    XinserveChatOptions.Builder copy = b.clone().temperature(0.9);
    assertThat(b.build().getTemperature()).isEqualTo(0.5);
    assertThat(copy.build().getTemperature()).isEqualTo(0.9);
    assertThat(b.combineWith(null).build()).isEqualTo(b.build());
  }
}
