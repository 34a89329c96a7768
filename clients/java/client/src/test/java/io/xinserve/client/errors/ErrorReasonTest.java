package io.xinserve.client.errors;

import static org.assertj.core.api.Assertions.assertThat;

import com.google.protobuf.Any;
import com.google.rpc.Code;
import com.google.rpc.ErrorInfo;
import io.grpc.protobuf.StatusProto;
import io.xinserve.v1.ErrorReason;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.EnumSource;

/** {@link XinserveException#errorReason()} reads {@code ErrorInfo.reason} as the contract's enum. */
class ErrorReasonTest {

  private static XinserveException refused(String reason, String domain) {
    com.google.rpc.Status.Builder status =
        com.google.rpc.Status.newBuilder().setCode(Code.FAILED_PRECONDITION_VALUE).setMessage("no");
    if (reason != null) {
      status.addDetails(
          Any.pack(ErrorInfo.newBuilder().setReason(reason).setDomain(domain).build()));
    }
    return XinserveExceptions.from(StatusProto.toStatusRuntimeException(status.build()));
  }

  @ParameterizedTest
  @EnumSource(
      value = ErrorReason.class,
      mode = EnumSource.Mode.EXCLUDE,
      names = {"ERROR_REASON_UNSPECIFIED", "UNRECOGNIZED"})
  void everyReasonOfTheContractReadsAsItsValue(ErrorReason value) {
    String wire = value.name().substring("ERROR_REASON_".length());
    XinserveException e = refused(wire, "xinserve.io");
    assertThat(e.reason()).contains(wire);
    assertThat(e.errorReason()).contains(value);
  }

  @ParameterizedTest
  @CsvSource({
    "MODEL_NOT_FOUND, googleapis.com",
    "A_REASON_FROM_A_NEWER_SERVER, xinserve.io",
    "UNSPECIFIED, xinserve.io"
  })
  void noValueForAnotherDomainOrAReasonTheContractLacks(String reason, String domain) {
    XinserveException e = refused(reason, domain);
    assertThat(e.reason()).contains(reason);
    assertThat(e.errorReason()).isEmpty();
  }

  @Test
  void noValueWithoutErrorInfo() {
    XinserveException e = refused(null, null);
    assertThat(e.reason()).isEmpty();
    assertThat(e.errorReason()).isEmpty();
  }
}
