package io.xinserve.it;

import static io.xinserve.it.LiveServers.TINY;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.xinserve.client.XinserveClient;
import io.xinserve.client.errors.FieldViolation;
import io.xinserve.client.errors.InvalidArgumentException;
import io.xinserve.v1.GenerateRequest;
import io.xinserve.v1.SamplingParams;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Parameters vLLM itself refuses reach the Java caller as INVALID_ARGUMENT naming the field: vLLM's
 * {@code SamplingParams} refuses {@code n > 1} with greedy sampling ("n must be 1 when using greedy
 * sampling"), which the server reports as a violation of {@code sampling_params.n}.
 */
@ExtendWith(XinserveServerExtension.class)
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class SamplingValidationIT {
  private static XinserveClient client;

  @BeforeAll
  static void connect() {
    client = LiveServers.get().plainClient().build();
  }

  @AfterAll
  static void disconnect() {
    client.close();
  }

  @Test
  void severalGreedyCompletionsAreInvalidArgumentNamingTheField() {
    GenerateRequest r =
        GenerateRequest.newBuilder()
            .setModel(TINY)
            .setPrompt("x")
            .setSamplingParams(SamplingParams.newBuilder().setN(3).setTemperature(0f).setMaxTokens(4))
            .build();
    assertThatThrownBy(() -> client.generate(r))
        .isInstanceOfSatisfying(
            InvalidArgumentException.class,
            e -> {
              assertThat(e.fieldViolations())
                  .extracting(FieldViolation::field)
                  .containsExactly("sampling_params.n");
              assertThat(e.fieldViolations().get(0).description()).isNotBlank();
              assertThat(e.requestId()).isPresent();
            });
  }
}
