//! The STM32F746G-DISCO's user LED LD1 (PI1) and user button B1 (PI11) as
//! `embedded-hal` 1.0 pins, over `stm32f7xx-hal`'s GPIO pins (which implement the older
//! traits).

use core::convert::Infallible;

use embedded_hal::digital::{ErrorType, InputPin, OutputPin};
use stm32f7xx_hal::gpio::{Floating, Input, Output, PushPull, PI1, PI11};

/// LD1, a push-pull output.
pub struct Led(pub PI1<Output<PushPull>>);

/// B1, a floating input (the board pulls it down).
pub struct Button(pub PI11<Input<Floating>>);

impl ErrorType for Led {
    type Error = Infallible;
}

impl OutputPin for Led {
    fn set_low(&mut self) -> Result<(), Infallible> {
        self.0.set_low();
        Ok(())
    }
    fn set_high(&mut self) -> Result<(), Infallible> {
        self.0.set_high();
        Ok(())
    }
}

impl ErrorType for Button {
    type Error = Infallible;
}

impl InputPin for Button {
    fn is_high(&mut self) -> Result<bool, Infallible> {
        Ok(self.0.is_high())
    }
    fn is_low(&mut self) -> Result<bool, Infallible> {
        Ok(self.0.is_low())
    }
}
