package io.xinserve.spring.ai;

import static org.assertj.core.api.Assertions.assertThat;

import io.xinserve.v1.ChatRequest;
import io.xinserve.v1.SamplingParams;
import java.util.List;

/** Every sampling field of {@link XinserveChatOptions}, set to a value no default has. */
final class EveryOption {
  static final String SCHEMA = "{\"type\":\"object\"}";

  private EveryOption() {}

  static XinserveChatOptions.Builder builder() {
    return XinserveChatOptions.builder()
        .model("per-call")
        .temperature(0.25)
        .topP(0.5)
        .topK(7)
        .maxTokens(3)
        .stopSequences(List.of(".", "\n"))
        .presencePenalty(0.125)
        .frequencyPenalty(0.375)
        .repetitionPenalty(1.125)
        .seed(42L)
        .ignoreEos(true)
        .outputSchema(SCHEMA);
  }

  /** @param sent the request the server received for options from {@link #builder()} */
  static void assertSent(ChatRequest sent) {
    assertThat(sent.getModel()).isEqualTo("per-call");
    SamplingParams sp = sent.getSamplingParams();
    assertThat(sp.getTemperature()).isEqualTo(0.25f);
    assertThat(sp.getTopP()).isEqualTo(0.5f);
    assertThat(sp.getTopK()).isEqualTo(7);
    assertThat(sp.getMaxTokens()).isEqualTo(3);
    assertThat(sp.getStopList()).containsExactly(".", "\n");
    assertThat(sp.getPresencePenalty()).isEqualTo(0.125f);
    assertThat(sp.getFrequencyPenalty()).isEqualTo(0.375f);
    assertThat(sp.getRepetitionPenalty()).isEqualTo(1.125f);
    assertThat(sp.getSeed()).isEqualTo(42L);
    assertThat(sp.getIgnoreEos()).isTrue();
    assertThat(sp.getJsonSchema()).isEqualTo(SCHEMA);
  }
}
